#include "plexus/host_memory.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define PLEXUS_MAPPED_HOST_MEMORY 1
#else
#define PLEXUS_MAPPED_HOST_MEMORY 0
#endif

namespace plexus::host_memory {

namespace {

std::atomic<std::size_t> discarded{0};

#if PLEXUS_MAPPED_HOST_MEMORY
std::mutex mapped_mutex;
std::map<std::uintptr_t, std::size_t> mapped;  // start -> length of each mapped buffer

std::uintptr_t page_size() {
  static const std::uintptr_t size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}
#endif

void* allocate_aligned_zeroed(std::size_t bytes) {
  void* pointer = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!pointer) throw std::bad_alloc();
  std::memset(pointer, 0, bytes);
  return pointer;
}

}  // namespace

void* allocate_zeroed(std::size_t bytes) {
#if PLEXUS_MAPPED_HOST_MEMORY
  if (bytes >= kMappedHostBytes) {
    void* pointer = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pointer == MAP_FAILED) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(mapped_mutex);
    mapped[reinterpret_cast<std::uintptr_t>(pointer)] = bytes;
    return pointer;
  }
#endif
  return allocate_aligned_zeroed(bytes);
}

void release(void* pointer) noexcept {
#if PLEXUS_MAPPED_HOST_MEMORY
  {
    std::lock_guard<std::mutex> lock(mapped_mutex);
    auto it = mapped.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it != mapped.end()) {
      munmap(pointer, it->second);
      mapped.erase(it);
      return;
    }
  }
#endif
  std::free(pointer);
}

void discard(const void* begin, const void* end, bool from_page_start) noexcept {
#if PLEXUS_MAPPED_HOST_MEMORY
  std::uintptr_t first = reinterpret_cast<std::uintptr_t>(begin), last = reinterpret_cast<std::uintptr_t>(end);
  if (first >= last) return;
  std::uintptr_t buffer_start = 0, buffer_end = 0;
  {
    std::lock_guard<std::mutex> lock(mapped_mutex);
    auto it = mapped.upper_bound(first);
    if (it == mapped.begin()) return;
    --it;
    buffer_start = it->first;
    buffer_end = it->first + it->second;
  }
  if (first < buffer_start || last > buffer_end) return;
  const std::uintptr_t page = page_size();
  first = from_page_start ? first / page * page : (first + page - 1) / page * page;
  last = last == buffer_end ? last : last / page * page;  // the buffer's last page holds nothing else
  if (first >= last) return;
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0) discarded += last - first;
#else
  (void)begin;
  (void)end;
  (void)from_page_start;
#endif
}

std::size_t discarded_bytes() noexcept { return discarded.load(); }

}  // namespace plexus::host_memory

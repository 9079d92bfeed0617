#include "plexus/cpu_parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace plexus {

namespace {
std::atomic<int> requested_threads{0};
}

void set_cpu_threads(int threads) { requested_threads = threads < 0 ? 0 : threads; }

int cpu_threads() {
  const int requested = requested_threads;
  if (requested > 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  const int threads = static_cast<int>(std::min<std::int64_t>(cpu_threads(), count));
  if (threads <= 1) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#ifdef _OPENMP
  std::exception_ptr first_error;
  std::mutex error_mutex;
  // Static schedule: items (images, channels, blocks of an image) are of similar cost.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
#else
  for (std::int64_t i = 0; i < count; ++i) body(i);
#endif
}

}  // namespace plexus

// host_memory: zeroed buffers, large ones mapped; discard gives back only
// whole pages inside the range asked (or from the page holding its start
// when told so) of a mapped buffer, and touches nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "plexus/host_memory.h"

#if defined(__linux__)
#include <unistd.h>
#endif

namespace plexus {
namespace {

TEST(HostMemory, BuffersComeZeroedAndAligned) {
  for (const std::size_t bytes : {std::size_t(1), std::size_t(1000), host_memory::kMappedHostBytes + 3}) {
    auto* p = static_cast<unsigned char*>(host_memory::allocate_zeroed(bytes));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes;
    for (std::size_t i = 0; i < bytes; i += 997) ASSERT_EQ(p[i], 0) << bytes << " at " << i;
    EXPECT_EQ(p[bytes - 1], 0);
    host_memory::release(p);
  }
}

#if defined(__linux__)
TEST(HostMemory, DiscardGivesBackWholePagesOfTheRangeOnly) {
  const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t bytes = host_memory::kMappedHostBytes;
  auto* p = static_cast<unsigned char*>(host_memory::allocate_zeroed(bytes));
  std::memset(p, 7, bytes);
  const std::size_t before = host_memory::discarded_bytes();
  // [page 2 + 100, page 6 + 5): pages 3, 4 and 5 go; the partial pages stay.
  host_memory::discard(p + 2 * kPage + 100, p + 6 * kPage + 5, false);
  EXPECT_EQ(host_memory::discarded_bytes() - before, 3 * kPage);
  EXPECT_EQ(p[3 * kPage - 1], 7);
  EXPECT_EQ(p[3 * kPage], 0);
  EXPECT_EQ(p[6 * kPage - 1], 0);
  EXPECT_EQ(p[6 * kPage], 7);
  EXPECT_EQ(p[2 * kPage + 100], 7);
  // From the page start: page 8 goes as well.
  host_memory::discard(p + 8 * kPage + 100, p + 10 * kPage, true);
  EXPECT_EQ(p[8 * kPage], 0);
  EXPECT_EQ(p[8 * kPage - 1], 7);
  EXPECT_EQ(p[10 * kPage], 7);
  host_memory::release(p);
}
#endif

TEST(HostMemory, DiscardLeavesSmallBuffersAlone) {
  const std::size_t bytes = 256 << 10;  // below kMappedHostBytes: not a mapped buffer
  auto* p = static_cast<unsigned char*>(host_memory::allocate_zeroed(bytes));
  std::memset(p, 9, bytes);
  host_memory::discard(p, p + bytes, true);
  for (std::size_t i = 0; i < bytes; i += 511) ASSERT_EQ(p[i], 9) << i;
  EXPECT_EQ(p[bytes - 1], 9);
  host_memory::release(p);
}

}  // namespace
}  // namespace plexus

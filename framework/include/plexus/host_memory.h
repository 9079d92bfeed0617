#pragma once
// Host memory for tensors: zeroed, 64-byte aligned. Buffers of
// kMappedHostBytes or more are whole pages mapped from the system, which
// provides each page (zeroed) when it is first touched, so a large tensor
// takes memory only as it is written; and the pages of a part of one that is
// no longer needed can be given back while the rest is still in use
// (discard), which a layer that is the last reader of its input does as it
// goes (ForwardOptions::discard_input).
#include <cstddef>

namespace plexus::host_memory {

// 32 MiB: what glibc maps from the system anyway (its largest mmap threshold).
inline constexpr std::size_t kMappedHostBytes = std::size_t(32) << 20;

void* allocate_zeroed(std::size_t bytes);
void release(void* pointer) noexcept;

// Gives back to the system the whole pages of [begin, end) that lie in one
// mapped buffer from allocate_zeroed; with `from_page_start`, also the page
// holding `begin`, whose bytes before it the caller no longer needs either.
// Their contents read as zero afterwards. Nothing happens for memory that is
// not such a buffer, or where the system offers no way to do it.
void discard(const void* begin, const void* end, bool from_page_start) noexcept;

// Bytes of mapped buffers given back by discard since the program started
// (tests check that it happens).
std::size_t discarded_bytes() noexcept;

}  // namespace plexus::host_memory

#include "zero_spans.h"

#include <algorithm>
#include <cstdint>

#include "plexus/cuda/cuda_check.h"

namespace plexus::cuda {

namespace {

struct ZeroSpanBatch {
  unsigned char* pointer[kMaxZeroSpans];
  unsigned long long bytes[kMaxZeroSpans];
};

// Blocks (x, y) zero span y: its 16-byte-aligned middle as uint4 words in a
// grid-stride loop over x, and block x = 0 the fewer than 16 bytes before
// and after the middle (blockDim.x >= 16).
__global__ void zero_spans_kernel(ZeroSpanBatch batch) {
  unsigned char* p = batch.pointer[blockIdx.y];
  const unsigned long long n = batch.bytes[blockIdx.y];
  const unsigned long long misalignment = reinterpret_cast<std::uintptr_t>(p) % 16;
  const unsigned long long head = min(n, (16 - misalignment) % 16);
  const unsigned long long words = (n - head) / 16;
  uint4* middle = reinterpret_cast<uint4*>(p + head);
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)
    middle[i] = make_uint4(0, 0, 0, 0);
  if (blockIdx.x == 0) {
    const unsigned long long tail = head + words * 16;
    if (threadIdx.x < head) p[threadIdx.x] = 0;
    if (tail + threadIdx.x < n) p[tail + threadIdx.x] = 0;
  }
}

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocksPerSpan = 256;
constexpr unsigned long long kWordsPerBlock = 4ull * kThreads;  // four grid-stride rounds before adding a block

}  // namespace

void zero_spans(cudaStream_t stream, const std::vector<device_memory::ByteSpan>& spans) {
  std::size_t next = 0;
  while (next < spans.size()) {
    ZeroSpanBatch batch{};
    unsigned count = 0;
    unsigned long long most_words = 0;
    for (; next < spans.size() && count < static_cast<unsigned>(kMaxZeroSpans); ++next) {
      if (spans[next].bytes == 0) continue;
      batch.pointer[count] = static_cast<unsigned char*>(spans[next].pointer);
      batch.bytes[count] = spans[next].bytes;
      most_words = std::max<unsigned long long>(most_words, spans[next].bytes / 16);
      ++count;
    }
    if (count == 0) continue;
    const auto blocks = static_cast<unsigned>(
        std::clamp<unsigned long long>((most_words + kWordsPerBlock - 1) / kWordsPerBlock, 1, kMaxBlocksPerSpan));
    zero_spans_kernel<<<dim3(blocks, count), kThreads, 0, stream>>>(batch);
    check_launch("zero_spans_kernel", __FILE__, __LINE__);
  }
}

}  // namespace plexus::cuda

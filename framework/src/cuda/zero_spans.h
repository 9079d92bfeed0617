#pragma once
// Zeroing many device buffers with one kernel launch per kMaxZeroSpans of
// them: inside a CUDA graph one node, where a cudaMemsetAsync each would be
// a chain of nodes that the GPU runs one after the other, a few
// microseconds apiece (a net's parameter gradients, zeroed every step).
#include <cuda_runtime.h>

#include <vector>

#include "../backend.h"

namespace plexus::cuda {

inline constexpr int kMaxZeroSpans = 64;

// Every byte of every span set to 0, enqueued on `stream` (the spans lie on
// the current device; empty spans are skipped).
void zero_spans(cudaStream_t stream, const std::vector<device_memory::ByteSpan>& spans);

}  // namespace plexus::cuda

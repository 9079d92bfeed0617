// CUDA half of channel_blocks.h. In batch item n, part k's elements are one
// contiguous span of S_k = C_k * inner elements, which the whole holds at
// n * S + o_k * inner (S = C * inner, o_k the part's first channel): block
// (x, k, z) copies part k's spans of items z, z + gridDim.z, ..., its threads
// striding over each span. So one launch copies every part (up to
// kPartsPerLaunch), with no division per element.
#include <algorithm>

#include "channel_blocks/channel_blocks.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace plexus::layers {

namespace {

constexpr int kPartsPerLaunch = 16;
constexpr long long kThreads = 256;
// Blocks a launch aims at: enough to fill the GPU with a few rounds of
// blocks, few enough that each thread copies several elements of a long span.
constexpr long long kBlocksPerLaunch = 4096;

// The parts of one launch, passed by value (kernel parameter space).
template <typename T>
struct PartsOfLaunch {
  T* data[kPartsPerLaunch];                 // null: a part not wanted (a split's skipped part)
  long long span[kPartsPerLaunch];          // S_k
  long long whole_offset[kPartsPerLaunch];  // o_k * inner
};

// join: whole[n * S + o_k * inner + j] = part_k[n * S_k + j]; split: the other way.
template <typename T, ChannelCopy direction>
__global__ void copy_channel_parts(T* whole, long long whole_span, long long batch, PartsOfLaunch<T> parts) {
  T* part = parts.data[blockIdx.y];
  if (part == nullptr) return;
  const long long span = parts.span[blockIdx.y];
  for (long long n = blockIdx.z; n < batch; n += gridDim.z) {
    T* part_item = part + n * span;
    T* whole_item = whole + n * whole_span + parts.whole_offset[blockIdx.y];
    for (long long j = blockIdx.x * kThreads + threadIdx.x; j < span; j += gridDim.x * kThreads) {
      if constexpr (direction == ChannelCopy::join) whole_item[j] = part_item[j];
      else part_item[j] = whole_item[j];
    }
  }
}

template <typename T>
void launch_copy(Context& ctx, T* whole, long long whole_span, long long batch, const PartsOfLaunch<T>& parts,
                 unsigned part_count, long long longest_span, ChannelCopy direction) {
  const long long items = std::min(batch, 65535LL);
  const long long blocks_per_span = std::max(1LL, kBlocksPerLaunch / (part_count * items));
  const dim3 grid(static_cast<unsigned>(std::min(blocks_per_span, (longest_span + kThreads - 1) / kThreads)),
                  part_count, static_cast<unsigned>(items));
  if (direction == ChannelCopy::join)
    copy_channel_parts<T, ChannelCopy::join><<<grid, kThreads, 0, cuda::stream(ctx)>>>(whole, whole_span, batch, parts);
  else
    copy_channel_parts<T, ChannelCopy::split>
        <<<grid, kThreads, 0, cuda::stream(ctx)>>>(whole, whole_span, batch, parts);
  cuda::check_launch("copy_channel_parts", __FILE__, __LINE__);
}

}  // namespace

void copy_channel_parts_cuda(Context& ctx, const Tensor& whole, const std::vector<const Tensor*>& parts,
                             const std::vector<std::int64_t>& sizes, ChannelCopy direction) {
  const long long batch = whole.shape()[0], inner = elements_per_channel(whole.shape());
  const long long whole_span = channels_of(whole.shape()) * inner;
  if (batch == 0 || whole_span == 0) return;
  dispatch_float(whole.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* whole_data = const_cast<T*>(whole.data<T>());
    long long offset = 0;  // o_k * inner of the next part
    for (std::size_t first = 0; first < parts.size(); first += kPartsPerLaunch) {
      const unsigned count = static_cast<unsigned>(std::min<std::size_t>(kPartsPerLaunch, parts.size() - first));
      PartsOfLaunch<T> launch{};
      long long longest = 0;
      for (unsigned k = 0; k < count; ++k) {
        const Tensor* part = parts[first + k];
        launch.data[k] = part ? const_cast<T*>(part->data<T>()) : nullptr;
        launch.span[k] = sizes[first + k] * inner;
        launch.whole_offset[k] = offset;
        offset += launch.span[k];
        if (part) longest = std::max(longest, launch.span[k]);
      }
      if (longest > 0) launch_copy(ctx, whole_data, whole_span, batch, launch, count, longest, direction);
    }
  });
}

}  // namespace plexus::layers

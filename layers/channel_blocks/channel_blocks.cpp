#include "channel_blocks/channel_blocks.h"

#include <algorithm>

#include "plexus/layer.h"

namespace plexus::layers {

namespace {

// destination[n, destination_offset + c, p] = source[n, source_offset + c, p]
// for every n, c < channels and p, on the CPU.
void copy_channel_slab_cpu(const Tensor& source, std::int64_t source_offset, Tensor& destination,
                           std::int64_t destination_offset, std::int64_t channels) {
  const std::int64_t batch = source.shape()[0], inner = elements_per_channel(source.shape());
  const std::int64_t source_channels = channels_of(source.shape());
  const std::int64_t destination_channels = channels_of(destination.shape());
  dispatch_float(source.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t n = 0; n < batch; ++n) {
      const T* from = source.data<T>() + (n * source_channels + source_offset) * inner;
      T* to = destination.data<T>() + (n * destination_channels + destination_offset) * inner;
      std::copy(from, from + channels * inner, to);
    }
  });
}

}  // namespace

std::int64_t channels_of(const Shape& shape) { return shape[1]; }

std::int64_t elements_per_channel(const Shape& shape) {
  std::int64_t elements = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) elements *= shape[d];
  return elements;
}

void join_channels(Context& ctx, const std::vector<const Tensor*>& parts, Tensor& whole) {
  std::vector<std::int64_t> sizes;
  for (const Tensor* part : parts) sizes.push_back(channels_of(part->shape()));
#if PLEXUS_WITH_CUDA
  if (ctx.device().is_cuda()) return copy_channel_parts_cuda(ctx, whole, parts, sizes, ChannelCopy::join);
#else
  (void)ctx;
#endif
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    copy_channel_slab_cpu(*parts[k], 0, whole, offset, sizes[k]);
    offset += sizes[k];
  }
}

void split_channels(Context& ctx, const Tensor& whole, const std::vector<Tensor*>& parts,
                    const std::vector<std::int64_t>& sizes) {
#if PLEXUS_WITH_CUDA
  if (ctx.device().is_cuda())
    return copy_channel_parts_cuda(ctx, whole, std::vector<const Tensor*>(parts.begin(), parts.end()), sizes,
                                   ChannelCopy::split);
#else
  (void)ctx;
#endif
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (parts[k]) copy_channel_slab_cpu(whole, offset, *parts[k], 0, sizes[k]);
    offset += sizes[k];
  }
}

}  // namespace plexus::layers

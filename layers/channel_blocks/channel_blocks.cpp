#include "channel_blocks/channel_blocks.h"

#include <algorithm>

#include "plexus/layer.h"

namespace plexus::layers {

std::int64_t channels_of(const Shape& shape) { return shape[1]; }

std::int64_t elements_per_channel(const Shape& shape) {
  std::int64_t elements = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) elements *= shape[d];
  return elements;
}

void copy_channel_slab(Context& ctx, const Tensor& source, Tensor& destination, const ChannelSlab& slab) {
#if PLEXUS_WITH_CUDA
  if (ctx.device().is_cuda()) return copy_channel_slab_cuda(ctx, source, destination, slab);
#else
  (void)ctx;
#endif
  const std::int64_t batch = source.shape()[0], inner = elements_per_channel(source.shape());
  const std::int64_t source_channels = channels_of(source.shape());
  const std::int64_t destination_channels = channels_of(destination.shape());
  dispatch_float(source.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t n = 0; n < batch; ++n) {
      const T* from = source.data<T>() + (n * source_channels + slab.source_offset) * inner;
      T* to = destination.data<T>() + (n * destination_channels + slab.destination_offset) * inner;
      std::copy(from, from + slab.channels * inner, to);
    }
  });
}

void join_channels(Context& ctx, const std::vector<const Tensor*>& parts, Tensor& whole) {
  std::int64_t offset = 0;
  for (const Tensor* part : parts) {
    const std::int64_t channels = channels_of(part->shape());
    copy_channel_slab(ctx, *part, whole, {channels, 0, offset});
    offset += channels;
  }
}

void split_channels(Context& ctx, const Tensor& whole, const std::vector<Tensor*>& parts,
                    const std::vector<std::int64_t>& sizes) {
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (parts[k]) copy_channel_slab(ctx, whole, *parts[k], {sizes[k], offset, 0});
    offset += sizes[k];
  }
}

}  // namespace plexus::layers

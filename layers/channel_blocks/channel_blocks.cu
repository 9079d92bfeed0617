// CUDA half of channel_blocks.h: one thread per copied element, grid-stride.
#include "channel_blocks/channel_blocks.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace plexus::layers {

namespace {

struct SlabGeometry {
  long long channels, inner;                         // copied channels, elements per channel
  long long source_channels, source_offset;          // C and first channel of the source
  long long destination_channels, destination_offset;
};

// destination[n, destination_offset + c, p] = source[n, source_offset + c, p]
// for n < N, c < channels, p < inner; thread k copies element k of the slab.
template <typename T>
__global__ void copy_channel_slab_kernel(const T* source, T* destination, SlabGeometry g, long long total) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
       k += (long long)gridDim.x * blockDim.x) {
    long long p = k % g.inner, c = (k / g.inner) % g.channels, n = k / (g.inner * g.channels);
    destination[(n * g.destination_channels + g.destination_offset + c) * g.inner + p] =
        source[(n * g.source_channels + g.source_offset + c) * g.inner + p];
  }
}

}  // namespace

void copy_channel_slab_cuda(Context& ctx, const Tensor& source, Tensor& destination, const ChannelSlab& slab) {
  SlabGeometry g{slab.channels,         elements_per_channel(source.shape()), channels_of(source.shape()),
                 slab.source_offset,    channels_of(destination.shape()),     slab.destination_offset};
  long long total = source.shape()[0] * g.channels * g.inner;
  if (total == 0) return;
  dispatch_float(source.dtype(), [&](auto zero) {
    using T = decltype(zero);
    copy_channel_slab_kernel<T><<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
        source.data<T>(), destination.data<T>(), g, total);
    cuda::check_launch("copy_channel_slab_kernel", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

// CUDA kernels of PixelShuffle (math in pixel_shuffle.h). Both directions are
// gathers with one thread per element written (grid-stride), so writes are
// coalesced and no two threads touch one element. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "pixel_shuffle/pixel_shuffle.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// x is [N, C*r*r, H, W], y is [N, C, H*r, W*r].
struct ShuffleGeometry {
  long long channels, height, width, r;  // C (of y), H and W (of x), r
};

// y[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]; one thread per y element.
template <typename Elements>
__global__ void pixel_shuffle_forward(Elements x, Elements y, ShuffleGeometry g, long long total) {
  const long long out_width = g.width * g.r, out_height = g.height * g.r;
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    long long ox = o % out_width, oy = (o / out_width) % out_height, nc = o / (out_width * out_height);
    long long h = oy / g.r, i = oy % g.r, w = ox / g.r, j = ox % g.r;
    y.store(o, x.load(((nc * g.r + i) * g.r + j) * g.height * g.width + h * g.width + w));
  }
}

// dx[n, c*r*r + i*r + j, h, w] = dy[n, c, h*r + i, w*r + j]; one thread per dx element.
template <typename Elements>
__global__ void pixel_shuffle_backward(Elements dy, Elements dx, ShuffleGeometry g, long long total) {
  for (long long d = blockIdx.x * (long long)blockDim.x + threadIdx.x; d < total;
       d += (long long)gridDim.x * blockDim.x) {
    long long w = d % g.width, h = (d / g.width) % g.height, depth = d / (g.width * g.height);
    long long j = depth % g.r, i = (depth / g.r) % g.r, nc = depth / (g.r * g.r);
    dx.store(d, dy.load((nc * g.height * g.r + h * g.r + i) * g.width * g.r + w * g.r + j));
  }
}

ShuffleGeometry geometry_of(const Shape& input, long long r) { return {input[1] / (r * r), input[2], input[3], r}; }

}  // namespace

void PixelShuffle::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long total = outputs[0]->numel();
  if (total == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    pixel_shuffle_forward<<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(inputs[0]), Elements::of(outputs[0]), geometry_of(inputs[0]->shape(), upscale_factor_), total);
    cuda::check_launch("pixel_shuffle_forward", __FILE__, __LINE__);
  });
}

void PixelShuffle::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                 const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long total = inputs[0]->numel();
  if (!input_grads[0] || total == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    pixel_shuffle_backward<<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(output_grads[0]), Elements::of(input_grads[0]), geometry_of(inputs[0]->shape(), upscale_factor_),
        total);
    cuda::check_launch("pixel_shuffle_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

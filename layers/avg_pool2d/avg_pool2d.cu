// CUDA kernels of AvgPool2d (math in avg_pool2d.h). Both directions are
// gathers with one thread per element written (grid-stride): forward sums
// the k x k window of its output, backward the outputs whose windows hold
// its input, so no two threads write one element and no atomics are needed.
// Each tensor f32 or bf16 (activation_elements.cuh), summed in f32, or all f64.
#include "activation_elements.cuh"
#include "avg_pool2d/avg_pool2d.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

struct PoolGeometry {
  long long height, width, out_height, out_width, kernel, stride, padding;
};

PoolGeometry device_geometry(const AvgPool2d::Geometry& g) {
  return {g.height, g.width, g.out_height, g.out_width, g.kernel, g.stride, g.padding};
}

// y[plane, oh, ow] = 1/(k*k) * sum of x over rows max(oh*s - p, 0) .. min(oh*s - p + k, H) - 1, columns likewise.
template <typename Elements>
__global__ void avg_pool2d_forward(Elements x, Elements y, PoolGeometry g, long long total) {
  using T = typename Elements::Value;
  const T scale = T(1) / static_cast<T>(g.kernel * g.kernel);
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    long long ow = o % g.out_width, oh = (o / g.out_width) % g.out_height, plane = o / (g.out_width * g.out_height);
    long long h0 = max(oh * g.stride - g.padding, 0LL), h1 = min(oh * g.stride - g.padding + g.kernel, g.height);
    long long w0 = max(ow * g.stride - g.padding, 0LL), w1 = min(ow * g.stride - g.padding + g.kernel, g.width);
    const long long x_plane = plane * g.height * g.width;
    T sum = 0;
    for (long long h = h0; h < h1; ++h)
      for (long long w = w0; w < w1; ++w) sum += x.load(x_plane + h * g.width + w);
    y.store(o, sum * scale);
  }
}

// The outputs o whose window holds input position i: ceil((i + p - k + 1) / s) <= o <= floor((i + p) / s), in [0,
// outputs).
__device__ void outputs_covering(long long i, long long kernel, long long stride, long long padding, long long outputs,
                                 long long& first, long long& last) {
  long long low = i + padding - kernel + 1;
  first = low <= 0 ? 0 : (low + stride - 1) / stride;
  last = min((i + padding) / stride, outputs - 1);
}

// dx[plane, h, w] = 1/(k*k) * sum of dy over the outputs whose windows hold (h, w).
template <typename Elements>
__global__ void avg_pool2d_backward(Elements dy, Elements dx, PoolGeometry g, long long total) {
  using T = typename Elements::Value;
  const T scale = T(1) / static_cast<T>(g.kernel * g.kernel);
  for (long long d = blockIdx.x * (long long)blockDim.x + threadIdx.x; d < total;
       d += (long long)gridDim.x * blockDim.x) {
    long long w = d % g.width, h = (d / g.width) % g.height, plane = d / (g.width * g.height);
    long long oh0, oh1, ow0, ow1;
    outputs_covering(h, g.kernel, g.stride, g.padding, g.out_height, oh0, oh1);
    outputs_covering(w, g.kernel, g.stride, g.padding, g.out_width, ow0, ow1);
    const long long dy_plane = plane * g.out_height * g.out_width;
    T sum = 0;
    for (long long oh = oh0; oh <= oh1; ++oh)
      for (long long ow = ow0; ow <= ow1; ++ow) sum += dy.load(dy_plane + oh * g.out_width + ow);
    dx.store(d, sum * scale);
  }
}

}  // namespace

void AvgPool2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long total = outputs[0]->numel();
  if (total == 0) return;
  const PoolGeometry g = device_geometry(geometry(inputs[0]->shape()));
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    avg_pool2d_forward<<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]),
                                                                               Elements::of(outputs[0]), g, total);
    cuda::check_launch("avg_pool2d_forward", __FILE__, __LINE__);
  });
}

void AvgPool2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                              const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long total = inputs[0]->numel();
  if (!input_grads[0] || total == 0) return;
  const PoolGeometry g = device_geometry(geometry(inputs[0]->shape()));
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    avg_pool2d_backward<<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(Elements::of(output_grads[0]),
                                                                                Elements::of(input_grads[0]), g, total);
    cuda::check_launch("avg_pool2d_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

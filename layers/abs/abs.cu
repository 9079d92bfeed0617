// CUDA kernels of Abs (math in abs.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64.
#include "abs/abs.h"
#include "activation_elements.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = |x|
template <typename Elements>
__global__ void abs_forward(Elements x, Elements y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, fabs(x.load(i)));
}

// dx = dy * sign(x), sign(0) = 0
template <typename Elements>
__global__ void abs_backward(Elements x, Elements dy, Elements dx, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T v = x.load(i), g = dy.load(i);
    dx.store(i, v > T(0) ? g : (v < T(0) ? -g : T(0)));
  }
}

}  // namespace

void Abs::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    abs_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]), Elements::of(outputs[0]),
                                                                    n);
    cuda::check_launch("abs_forward", __FILE__, __LINE__);
  });
}

void Abs::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  const long long n = inputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    abs_backward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(inputs[0]), Elements::of(output_grads[0]), Elements::of(input_grads[0]), n);
    cuda::check_launch("abs_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

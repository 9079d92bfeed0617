// CUDA kernels of Tanh (math in tanh.h). Element-wise: one thread per
// element, grid-stride so any size fits the capped grid. Each tensor f32 or
// bf16 (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "tanh/tanh.h"

namespace plexus::layers {

namespace {

// y = scale * tanh(x)
template <typename Elements>
__global__ void tanh_forward(Elements x, Elements y, typename Elements::Value scale, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, scale * tanh(x.load(i)));
}

// dx = dy * scale * (1 - (y / scale)^2), from the forward's output y (as stored)
template <typename Elements>
__global__ void tanh_backward(Elements y, Elements dy, Elements dx, typename Elements::Value scale, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T t = y.load(i) / scale;
    dx.store(i, dy.load(i) * scale * (T(1) - t * t));
  }
}

}  // namespace

void Tanh::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    using T = typename Elements::Value;
    tanh_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]), Elements::of(outputs[0]),
                                                                     T(scale_), n);
    cuda::check_launch("tanh_forward", __FILE__, __LINE__);
  });
}

void Tanh::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors& outputs,
                         const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = outputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_activation_elements(outputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    using T = typename Elements::Value;
    tanh_backward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(outputs[0]), Elements::of(output_grads[0]), Elements::of(input_grads[0]), T(scale_), n);
    cuda::check_launch("tanh_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

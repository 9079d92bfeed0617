// CUDA kernels of ReLU (math in relu.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "relu/relu.h"

namespace plexus::layers {

namespace {

// y = max(x, 0)
template <typename Elements>
__global__ void relu_forward(Elements x, Elements y, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T v = x.load(i);
    y.store(i, v > T(0) ? v : T(0));
  }
}

// dx = dy * [x > 0]
template <typename Elements>
__global__ void relu_backward(Elements x, Elements dy, Elements dx, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dx.store(i, x.load(i) > T(0) ? dy.load(i) : T(0));
}

}  // namespace

void ReLU::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    relu_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]), Elements::of(outputs[0]),
                                                                     n);
    cuda::check_launch("relu_forward", __FILE__, __LINE__);
  });
}

void ReLU::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                         const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = inputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    relu_backward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(inputs[0]), Elements::of(output_grads[0]), Elements::of(input_grads[0]), n);
    cuda::check_launch("relu_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

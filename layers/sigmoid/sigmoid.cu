// CUDA kernels of Sigmoid (math in sigmoid.h). Element-wise: one thread per
// element, grid-stride so any size fits the capped grid. Each tensor f32 or
// bf16 (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "sigmoid/sigmoid.h"

namespace plexus::layers {

namespace {

// y = 1 / (1 + exp(-x))  (exp(-x) = +inf for very negative x gives y = 0)
template <typename Elements>
__global__ void sigmoid_forward(Elements x, Elements y, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, T(1) / (T(1) + exp(-x.load(i))));
}

// dx = dy * y * (1 - y), from the forward's output y (as stored)
template <typename Elements>
__global__ void sigmoid_backward(Elements y, Elements dy, Elements dx, long long n) {
  using T = typename Elements::Value;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T s = y.load(i);
    dx.store(i, dy.load(i) * s * (T(1) - s));
  }
}

}  // namespace

void Sigmoid::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    sigmoid_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]),
                                                                        Elements::of(outputs[0]), n);
    cuda::check_launch("sigmoid_forward", __FILE__, __LINE__);
  });
}

void Sigmoid::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors& outputs,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = outputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_activation_elements(outputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    sigmoid_backward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(outputs[0]), Elements::of(output_grads[0]), Elements::of(input_grads[0]), n);
    cuda::check_launch("sigmoid_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

// CUDA kernels of Mul (math in mul.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "mul/mul.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = a * b
template <typename Elements>
__global__ void mul_forward(Elements a, Elements b, Elements y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, a.load(i) * b.load(i));
}

// dL/da = dL/dy * b,  dL/db = dL/dy * a  (either gradient may be not wanted)
template <typename Elements>
__global__ void mul_backward(Elements a, Elements b, Elements dy, Elements da, Elements db, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const auto g = dy.load(i);
    if (da.wanted()) da.store(i, g * b.load(i));
    if (db.wanted()) db.store(i, g * a.load(i));
  }
}

}  // namespace

void Mul::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = outputs[0]->numel();
  if (n == 0) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    mul_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(inputs[0]), Elements::of(inputs[1]),
                                                                    Elements::of(outputs[0]), n);
    cuda::check_launch("mul_forward", __FILE__, __LINE__);
  });
}

void Mul::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  long long n = output_grads[0]->numel();
  if (n == 0 || (!input_grads[0] && !input_grads[1])) return;
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    mul_backward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        Elements::of(inputs[0]), Elements::of(inputs[1]), Elements::of(output_grads[0]), Elements::of(input_grads[0]),
        Elements::of(input_grads[1]), n);
    cuda::check_launch("mul_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

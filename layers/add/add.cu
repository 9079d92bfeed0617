// CUDA kernels of Add (math in add.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64. The backward is a copy of dL/dy
// into each input gradient (copy_output_grad, on the context's stream).
#include "activation_elements.cuh"
#include "add/add.h"
#include "convolution/scratch.h"
#include "fused_activation.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = activation(a + b)  (y may alias a: more inputs are added as y = y + x_i,
// the fused activation, when any, applied by the last launch only)
template <typename Elements>
__global__ void add_forward(Elements a, Elements b, Elements y, long long n, bool activate,
                            typename Elements::Value negative_slope) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, activated(a.load(i) + b.load(i), activate, negative_slope));
}

}  // namespace

// Summed left to right, as the CPU does: partial sums x_0 + ... + x_i go to
// y itself, or, when y is bf16, to an f32 buffer, so that y is rounded once
// and holds the f32 sum rounded to bf16.
void Add::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = outputs[0]->numel();
  if (n == 0) return;
  Tensor* y = outputs[0];
  Tensor* partial_sum = y;
  if (y->dtype() == DType::bf16 && inputs.size() > 2)
    partial_sum = &scratch_tensor(partial_sum_, y->shape(), DType::f32, y->device());
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      const bool last = i + 1 == inputs.size();
      const Tensor* sum_so_far = i == 1 ? inputs[0] : partial_sum;
      Tensor* sum = last ? y : partial_sum;
      using Value = typename Elements::Value;
      add_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(sum_so_far), Elements::of(inputs[i]),
                                                                      Elements::of(sum), n, last && activation_.active,
                                                                      static_cast<Value>(activation_.negative_slope));
      cuda::check_launch("add_forward", __FILE__, __LINE__);
    }
  });
}

void Add::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  copy_output_grad(ctx, output_grads, input_grads);
}

}  // namespace plexus::layers

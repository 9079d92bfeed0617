// CUDA kernels of Add (math in add.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. Each tensor f32 or bf16
// (activation_elements.cuh), or all f64. The backward is a copy of dL/dy
// into each input gradient (copy_output_grad, on the context's stream), or,
// for a broadcast input, dL/dy's sum (broadcast.h's kernels).
#include "activation_elements.cuh"
#include "add/add.h"
#include "broadcast.h"
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

// a + b, then the fused activation when `activate` (broadcast::forward_cuda's fn).
template <typename Value>
struct ActivatedSum {
  bool activate;
  Value negative_slope;
  __device__ Value operator()(Value a, Value b) const { return activated(a + b, activate, negative_slope); }
};

// dL/dy at y's offset: the terms of a broadcast input's gradient (broadcast::reduce_cuda's term).
template <typename Elements>
struct OutputGradTerm {
  Elements dy;
  __device__ typename Elements::Value operator()(long long, long long y_offset, long long) const {
    return dy.load(y_offset);
  }
};

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
  const bool broadcasting = broadcasts(inputs);
  dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      const bool last = i + 1 == inputs.size();
      const Tensor* sum_so_far = i == 1 ? inputs[0] : partial_sum;
      Tensor* sum = last ? y : partial_sum;
      using Value = typename Elements::Value;
      const bool activate = last && forward_options().output_activation.active;
      const auto negative_slope = static_cast<Value>(forward_options().output_activation.negative_slope);
      if (broadcasting) {
        broadcast::forward_cuda(ActivatedSum<Value>{activate, negative_slope}, Elements::of(sum_so_far),
                                Elements::of(inputs[i]), Elements::of(sum),
                                broadcast::forward_walk(sum_so_far->shape(), inputs[i]->shape(), y->shape()),
                                cuda::stream(ctx));
        continue;
      }
      add_forward<<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(Elements::of(sum_so_far), Elements::of(inputs[i]),
                                                                      Elements::of(sum), n, activate, negative_slope);
      cuda::check_launch("add_forward", __FILE__, __LINE__);
    }
  });
}

// As backward_cpu: copies for the inputs of y's shape, sums for the
// broadcast ones (in the accumulator of dL/dy's elements: f32, or f64).
void Add::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  copy_output_grad(ctx, output_grads, input_grads);
  const Tensor& dy = *output_grads[0];
  for (std::size_t i = 0; i < input_grads.size(); ++i) {
    if (!input_grads[i] || input_grads[i]->shape() == dy.shape()) continue;
    dispatch_activation_elements(dy.dtype(), [&](auto kind) {
      using Elements = decltype(kind);
      broadcast::reduce_cuda(OutputGradTerm<Elements>{Elements::of(&dy)}, Elements::of(input_grads[i]),
                             broadcast::reduction_walk(inputs[i]->shape(), dy.shape(), dy.shape()), cuda::stream(ctx));
    });
  }
}

}  // namespace plexus::layers

// CUDA passes of the element-wise layers (formulas in elementwise_ops.h).
// One thread per element, grid-stride so any size fits the capped grid;
// one kernel template per pass, instantiated for every op of the tables.
// Each tensor f32 or bf16 (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "elementwise/elementwise.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = f(x)
template <typename Op, typename Elements>
__global__ void unary_forward(Op op, Elements x, Elements y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, op.forward(x.load(i)));
}

// dx = the op's backward at v (x, or y where Op::backward_reads_output) and dy
template <typename Op, typename Elements>
__global__ void unary_backward(Op op, Elements v, Elements dy, Elements dx, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dx.store(i, op.backward(v.load(i), dy.load(i)));
}

// y = f(a, b)
template <typename Op, typename Elements>
__global__ void binary_forward(Op op, Elements a, Elements b, Elements y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y.store(i, op.forward(a.load(i), b.load(i)));
}

// da and db from a, b and dy (either gradient may be not wanted)
template <typename Op, typename Elements>
__global__ void binary_backward(Op op, Elements a, Elements b, Elements dy, Elements da, Elements db, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const auto g = dy.load(i);
    if (da.wanted()) da.store(i, op.grad_a(a.load(i), b.load(i), g));
    if (db.wanted()) db.store(i, op.grad_b(a.load(i), b.load(i), g));
  }
}

}  // namespace

void ElementwiseLayer::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = outputs[0]->numel();
  if (n == 0) return;
  std::visit(
      [&](const auto& op) {
        dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
          using Elements = decltype(kind);
          const unsigned int blocks = cuda::blocks_for(n);
          if constexpr (elementwise::is_unary<decltype(op)>)
            unary_forward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(inputs[0]), Elements::of(outputs[0]),
                                                                 n);
          else
            binary_forward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(inputs[0]), Elements::of(inputs[1]),
                                                                  Elements::of(outputs[0]), n);
          cuda::check_launch("elementwise forward", __FILE__, __LINE__);
        });
      },
      op_);
}

// As backward_cpu: a unary op's derivative at x or y, a binary op's partials.
void ElementwiseLayer::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = output_grads[0]->numel();
  if (n == 0 || (!input_grads[0] && (input_grads.size() < 2 || !input_grads[1]))) return;
  std::visit(
      [&](const auto& op) {
        using Op = std::decay_t<decltype(op)>;
        const Tensor* at = inputs[0];
        if constexpr (elementwise::is_unary<Op>) at = Op::backward_reads_output ? outputs[0] : inputs[0];
        dispatch_activation_elements(at->dtype(), [&](auto kind) {
          using Elements = decltype(kind);
          const unsigned int blocks = cuda::blocks_for(n);
          if constexpr (elementwise::is_unary<Op>)
            unary_backward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(at), Elements::of(output_grads[0]),
                                                                  Elements::of(input_grads[0]), n);
          else
            binary_backward<<<blocks, 256, 0, cuda::stream(ctx)>>>(
                op, Elements::of(inputs[0]), Elements::of(inputs[1]), Elements::of(output_grads[0]),
                Elements::of(input_grads[0]), Elements::of(input_grads[1]), n);
          cuda::check_launch("elementwise backward", __FILE__, __LINE__);
        });
      },
      op_);
}

}  // namespace plexus::layers

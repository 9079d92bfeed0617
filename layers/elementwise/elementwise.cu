// CUDA passes of the element-wise layers (formulas in elementwise_ops.h).
// One thread per element, grid-stride so any size fits the capped grid;
// one kernel template per pass, instantiated for every op of the tables.
// Each tensor f32 or bf16 (activation_elements.cuh), or all f64. A binary
// op's inputs of two shapes broadcast, through broadcast.h's kernels.
#include "activation_elements.cuh"
#include "broadcast.h"
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

// A binary op's forward as broadcast::forward_cuda's fn.
template <typename Op>
struct BinaryForward {
  Op op;
  template <typename Value>
  __device__ Value operator()(Value a, Value b) const {
    return op.forward(a, b);
  }
};

// The terms of a broadcast input's gradient (broadcast::reduce_cuda's term):
// dL/da (x_is_a) or dL/db at one element of y, x being the input whose
// gradient it is and `other` the other input.
template <typename Op, typename Elements>
struct BinaryGradTerm {
  Op op;
  Elements x, other, dy;
  bool x_is_a;
  __device__ typename Elements::Value operator()(long long j, long long y_offset, long long other_offset) const {
    const auto g = dy.load(y_offset);
    return x_is_a ? op.grad_a(x.load(j), other.load(other_offset), g)
                  : op.grad_b(other.load(other_offset), x.load(j), g);
  }
};

}  // namespace

void ElementwiseLayer::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = outputs[0]->numel();
  if (n == 0) return;
  std::visit(
      [&](const auto& op) {
        dispatch_activation_elements(inputs[0]->dtype(), [&](auto kind) {
          using Elements = decltype(kind);
          const unsigned int blocks = cuda::blocks_for(n);
          if constexpr (elementwise::is_unary<decltype(op)>) {
            unary_forward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(inputs[0]), Elements::of(outputs[0]),
                                                                 n);
          } else if (inputs[0]->shape() != inputs[1]->shape()) {
            broadcast::forward_cuda(
                BinaryForward<std::decay_t<decltype(op)>>{op}, Elements::of(inputs[0]), Elements::of(inputs[1]),
                Elements::of(outputs[0]),
                broadcast::forward_walk(inputs[0]->shape(), inputs[1]->shape(), outputs[0]->shape()),
                cuda::stream(ctx));
            return;
          } else {
            binary_forward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(inputs[0]), Elements::of(inputs[1]),
                                                                  Elements::of(outputs[0]), n);
          }
          cuda::check_launch("elementwise forward", __FILE__, __LINE__);
        });
      },
      op_);
}

// As backward_cpu: a unary op's derivative at x or y, a binary op's partials.
void ElementwiseLayer::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = output_grads[0]->numel();
  // A broadcast input's gradient is a sum, 0 over an empty y.
  const bool broadcasting = inputs.size() == 2 && inputs[0]->shape() != inputs[1]->shape();
  if ((n == 0 && !broadcasting) || (!input_grads[0] && (input_grads.size() < 2 || !input_grads[1]))) return;
  std::visit(
      [&](const auto& op) {
        using Op = std::decay_t<decltype(op)>;
        const Tensor* at = inputs[0];
        if constexpr (elementwise::is_unary<Op>) at = Op::backward_reads_output ? outputs[0] : inputs[0];
        dispatch_activation_elements(at->dtype(), [&](auto kind) {
          using Elements = decltype(kind);
          const unsigned int blocks = cuda::blocks_for(n);
          if constexpr (elementwise::is_unary<Op>) {
            unary_backward<<<blocks, 256, 0, cuda::stream(ctx)>>>(op, Elements::of(at), Elements::of(output_grads[0]),
                                                                  Elements::of(input_grads[0]), n);
          } else if (broadcasting) {
            for (int k = 0; k < 2; ++k) {
              if (!input_grads[k]) continue;
              const Tensor *x = inputs[k], *other = inputs[1 - k];
              broadcast::reduce_cuda(BinaryGradTerm<Op, Elements>{op, Elements::of(x), Elements::of(other),
                                                                  Elements::of(output_grads[0]), k == 0},
                                     Elements::of(input_grads[k]),
                                     broadcast::reduction_walk(x->shape(), other->shape(), output_grads[0]->shape()),
                                     cuda::stream(ctx));
            }
            return;
          } else {
            binary_backward<<<blocks, 256, 0, cuda::stream(ctx)>>>(
                op, Elements::of(inputs[0]), Elements::of(inputs[1]), Elements::of(output_grads[0]),
                Elements::of(input_grads[0]), Elements::of(input_grads[1]), n);
          }
          cuda::check_launch("elementwise backward", __FILE__, __LINE__);
        });
      },
      op_);
}

}  // namespace plexus::layers

// CUDA kernels of Add (math in add.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid. The backward is a copy of
// dL/dy into each input gradient (copy_elements, on the context's stream).
#include "add/add.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = a + b  (y may alias a: more inputs are added as y = y + x_i)
template <typename T>
__global__ void add_forward(const T* a, const T* b, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}

}  // namespace

void Add::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = outputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* y = outputs[0]->data<T>();
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      const T* sum_so_far = i == 1 ? inputs[0]->data<T>() : y;
      add_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(sum_so_far, inputs[i]->data<T>(), y, n);
      cuda::check_launch("add_forward", __FILE__, __LINE__);
    }
  });
}

void Add::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  copy_output_grad(ctx, output_grads, input_grads);
}

}  // namespace plexus::layers

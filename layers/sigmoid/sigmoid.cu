// CUDA kernels of Sigmoid (math in sigmoid.h). Element-wise: one thread per
// element, grid-stride so any size fits the capped grid.
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "sigmoid/sigmoid.h"

namespace plexus::layers {

namespace {

// y = 1 / (1 + exp(-x))  (exp(-x) = +inf for very negative x gives y = 0)
template <typename T>
__global__ void sigmoid_forward(const T* x, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = T(1) / (T(1) + exp(-x[i]));
}

// dx = dy * y * (1 - y), from the forward's output y
template <typename T>
__global__ void sigmoid_backward(const T* y, const T* dy, T* dx, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    dx[i] = dy[i] * y[i] * (T(1) - y[i]);
}

}  // namespace

void Sigmoid::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    sigmoid_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(inputs[0]->data<T>(),
                                                                          outputs[0]->data<T>(), n);
    cuda::check_launch("sigmoid_forward", __FILE__, __LINE__);
  });
}

void Sigmoid::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors& outputs,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = outputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    sigmoid_backward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        outputs[0]->data<T>(), output_grads[0]->data<T>(), input_grads[0]->data<T>(), n);
    cuda::check_launch("sigmoid_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

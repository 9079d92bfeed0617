// CUDA kernels of Abs (math in abs.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid.
#include "abs/abs.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = |x|
template <typename T>
__global__ void abs_forward(const T* x, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = fabs(x[i]);
}

// dx = dy * sign(x), sign(0) = 0
template <typename T>
__global__ void abs_backward(const T* x, const T* dy, T* dx, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    dx[i] = x[i] > T(0) ? dy[i] : (x[i] < T(0) ? -dy[i] : T(0));
}

}  // namespace

void Abs::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    abs_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(inputs[0]->data<T>(),
                                                                      outputs[0]->data<T>(), n);
    cuda::check_launch("abs_forward", __FILE__, __LINE__);
  });
}

void Abs::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                        const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = inputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    abs_backward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), output_grads[0]->data<T>(), input_grads[0]->data<T>(), n);
    cuda::check_launch("abs_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

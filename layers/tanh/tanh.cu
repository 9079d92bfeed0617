// CUDA kernels of Tanh (math in tanh.h). Element-wise: one thread per
// element, grid-stride so any size fits the capped grid.
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "tanh/tanh.h"

namespace plexus::layers {

namespace {

// y = scale * tanh(x)
template <typename T>
__global__ void tanh_forward(const T* x, T* y, T scale, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = scale * tanh(x[i]);
}

// dx = dy * scale * (1 - (y / scale)^2), from the forward's output y
template <typename T>
__global__ void tanh_backward(const T* y, const T* dy, T* dx, T scale, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const T t = y[i] / scale;
    dx[i] = dy[i] * scale * (T(1) - t * t);
  }
}

}  // namespace

void Tanh::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    tanh_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(inputs[0]->data<T>(), outputs[0]->data<T>(),
                                                                       T(scale_), n);
    cuda::check_launch("tanh_forward", __FILE__, __LINE__);
  });
}

void Tanh::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors& outputs,
                         const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = outputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    tanh_backward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        outputs[0]->data<T>(), output_grads[0]->data<T>(), input_grads[0]->data<T>(), T(scale_), n);
    cuda::check_launch("tanh_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

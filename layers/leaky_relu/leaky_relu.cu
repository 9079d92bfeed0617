// CUDA kernels of LeakyReLU (math in leaky_relu.h). Element-wise: one thread
// per element, grid-stride so any size fits the capped grid.
#include "leaky_relu/leaky_relu.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = x for x > 0, slope * x otherwise
template <typename T>
__global__ void leaky_relu_forward(const T* x, T* y, T slope, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] > T(0) ? x[i] : slope * x[i];
}

// dx = dy for x > 0, slope * dy otherwise
template <typename T>
__global__ void leaky_relu_backward(const T* x, const T* dy, T* dx, T slope, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    dx[i] = x[i] > T(0) ? dy[i] : slope * dy[i];
}

}  // namespace

void LeakyReLU::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    leaky_relu_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), outputs[0]->data<T>(), T(negative_slope_), n);
    cuda::check_launch("leaky_relu_forward", __FILE__, __LINE__);
  });
}

void LeakyReLU::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                              const ConstTensors& output_grads, const MutableTensors& input_grads) {
  long long n = inputs[0]->numel();
  if (!input_grads[0] || n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    leaky_relu_backward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), output_grads[0]->data<T>(), input_grads[0]->data<T>(), T(negative_slope_), n);
    cuda::check_launch("leaky_relu_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

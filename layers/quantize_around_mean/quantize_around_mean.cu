// CUDA kernels of QuantizeAroundMean (math in quantize_around_mean.h).
// Element-wise: one thread per element, grid-stride so any size fits the capped grid.
#include <curand_kernel.h>

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "quantize_around_mean/quantize_around_mean.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;

__device__ inline float unit_uniform(curandStatePhilox4_32_10_t* state, float) { return curand_uniform(state); }
__device__ inline double unit_uniform(curandStatePhilox4_32_10_t* state, double) {
  return curand_uniform_double(state);
}

// Training: y_hat = y + (v - 1/2) with v ~ U(0, 1], so y_hat - y ~ U(-1/2, 1/2].
// v for element i is the first Philox4x32-10 draw of subsequence first + i
// under the seed read from *seed (see cuda::device_random).
// rounded (may be null) = round(y - mu) + mu, the straight-through output.
template <typename T>
__global__ void quantize_around_mean_noise(const T* y, const T* mu, T* y_hat, T* rounded, long long n,
                                           const std::uint64_t* seed, std::uint64_t first) {
  const std::uint64_t key = *seed;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    curandStatePhilox4_32_10_t state;
    curand_init(key, first + static_cast<std::uint64_t>(i), 0, &state);
    y_hat[i] = y[i] + (unit_uniform(&state, T(0)) - T(0.5));
    if (rounded) rounded[i] = round(y[i] - mu[i]) + mu[i];
  }
}

// Eval: y_hat = round(y - mu) + mu, halves away from zero (CUDA's round(), like
// std::round), into both outputs (second may be null).
template <typename T>
__global__ void quantize_around_mean_round(const T* y, const T* mu, T* y_hat, T* rounded, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T value = round(y[i] - mu[i]) + mu[i];
    y_hat[i] = value;
    if (rounded) rounded[i] = value;
  }
}

// dL/dy = g + g_st (g_st null: g alone), straight through; dL/dmu is zeroed apart.
template <typename T>
__global__ void quantize_around_mean_backward(const T* g, const T* g_st, T* y_grad, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y_grad[i] = g_st ? g[i] + g_st[i] : g[i];
}

}  // namespace

void QuantizeAroundMean::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* y = inputs[0]->data<T>();
    const T* mu = inputs[1]->data<T>();
    T* y_hat = outputs[0]->data<T>();
    T* rounded = straight_through_ ? outputs[1]->data<T>() : nullptr;
    if (!ctx.training()) {
      quantize_around_mean_round<T>
          <<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(y, mu, y_hat, rounded, n);
      cuda::check_launch("quantize_around_mean_round", __FILE__, __LINE__);
      return;
    }
    const cuda::DeviceRandom random = cuda::device_random(ctx, static_cast<std::uint64_t>(n));
    quantize_around_mean_noise<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        y, mu, y_hat, rounded, n, random.seed, random.first);
    cuda::check_launch("quantize_around_mean_noise", __FILE__, __LINE__);
  });
}

void QuantizeAroundMean::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                       const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  if (Tensor* mean_grad = input_grads[1])
    cuda::check_cuda(cudaMemsetAsync(mean_grad->raw_data(), 0, mean_grad->nbytes(), cuda::stream(ctx)),
                     "cudaMemsetAsync", __FILE__, __LINE__);
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* g_st = straight_through_ ? output_grads[1]->data<T>() : nullptr;
    quantize_around_mean_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        output_grads[0]->data<T>(), g_st, input_grads[0]->data<T>(), n);
    cuda::check_launch("quantize_around_mean_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

// CUDA kernels of UniformNoise (math in uniform_noise.h). Element-wise: one
// thread per element, grid-stride so any size fits the capped grid.
#include <curand_kernel.h>

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "uniform_noise/uniform_noise.h"

namespace plexus::layers {

namespace {

// Training: y = x + (v - 1/2) with v ~ U(0, 1], so y - x ~ U(-1/2, 1/2].
// v for element i is the first Philox4x32-10 draw of subsequence first + i
// under the seed read from *seed (see cuda::device_random).
__device__ inline float unit_uniform(curandStatePhilox4_32_10_t* state, float) { return curand_uniform(state); }
__device__ inline double unit_uniform(curandStatePhilox4_32_10_t* state, double) {
  return curand_uniform_double(state);
}

template <typename T>
__global__ void uniform_noise_add(const T* x, T* y, long long n, const std::uint64_t* seed, std::uint64_t first) {
  const std::uint64_t key = *seed;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    curandStatePhilox4_32_10_t state;
    curand_init(key, first + static_cast<std::uint64_t>(i), 0, &state);
    y[i] = x[i] + (unit_uniform(&state, T(0)) - T(0.5));
  }
}

// Eval: y = round(x), halves away from zero (CUDA's round(), like std::round).
template <typename T>
__global__ void uniform_noise_round(const T* x, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = round(x[i]);
}

}  // namespace

void UniformNoise::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  const long long n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (!ctx.training()) {
      uniform_noise_round<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(x.data<T>(), outputs[0]->data<T>(), n);
      cuda::check_launch("uniform_noise_round", __FILE__, __LINE__);
      return;
    }
    const cuda::DeviceRandom random = cuda::device_random(ctx, static_cast<std::uint64_t>(n));
    uniform_noise_add<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(x.data<T>(), outputs[0]->data<T>(), n,
                                                                             random.seed, random.first);
    cuda::check_launch("uniform_noise_add", __FILE__, __LINE__);
  });
}

// dL/dx = dL/dy (straight through, see uniform_noise.h): a device copy.
void UniformNoise::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&,
                                 const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0] || input_grads[0]->numel() == 0) return;
  cuda::check_cuda(cudaMemcpyAsync(input_grads[0]->raw_data(), output_grads[0]->raw_data(), input_grads[0]->nbytes(),
                                   cudaMemcpyDeviceToDevice, cuda::stream(ctx)),
                   "cudaMemcpyAsync", __FILE__, __LINE__);
}

}  // namespace plexus::layers

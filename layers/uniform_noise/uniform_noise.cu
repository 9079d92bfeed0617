// CUDA kernels of UniformNoise (math in uniform_noise.h). Element-wise: one
// thread per element, grid-stride so any size fits the capped grid.
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "uniform_noise/uniform_noise.h"

namespace plexus::layers {

namespace {

// Training: y = x + (v - 1/2) with v ~ U(0, 1] from cuRAND, so y - x ~ U(-1/2, 1/2].
template <typename T>
__global__ void uniform_noise_add(const T* x, const T* uniform, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] + (uniform[i] - T(0.5));
}

// Eval: y = round(x), halves away from zero (CUDA's round(), like std::round).
template <typename T>
__global__ void uniform_noise_round(const T* x, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = round(x[i]);
}

void generate_uniform(curandGenerator_t generator, float* values, long long n) {
  cuda::check_curand(curandGenerateUniform(generator, values, static_cast<size_t>(n)),
                     "curandGenerateUniform", __FILE__, __LINE__);
}
void generate_uniform(curandGenerator_t generator, double* values, long long n) {
  cuda::check_curand(curandGenerateUniformDouble(generator, values, static_cast<size_t>(n)),
                     "curandGenerateUniformDouble", __FILE__, __LINE__);
}

}  // namespace

void UniformNoise::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  const long long n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (!ctx.training()) {
      uniform_noise_round<T>
          <<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(x.data<T>(), outputs[0]->data<T>(), n);
      cuda::check_launch("uniform_noise_round", __FILE__, __LINE__);
      return;
    }
    if (!uniform_scratch_.defined() || uniform_scratch_.numel() != n ||
        uniform_scratch_.dtype() != x.dtype() || uniform_scratch_.device() != x.device())
      uniform_scratch_ = Tensor({n}, x.dtype(), x.device());
    // The generator runs on the context's stream (set when it was created),
    // so the kernel below sees the draws in order.
    generate_uniform(cuda::curand(ctx), uniform_scratch_.data<T>(), n);
    uniform_noise_add<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        x.data<T>(), uniform_scratch_.data<T>(), outputs[0]->data<T>(), n);
    cuda::check_launch("uniform_noise_add", __FILE__, __LINE__);
  });
}

// dL/dx = dL/dy (straight through, see uniform_noise.h): a device copy.
void UniformNoise::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&,
                                 const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0] || input_grads[0]->numel() == 0) return;
  cuda::check_cuda(cudaMemcpyAsync(input_grads[0]->raw_data(), output_grads[0]->raw_data(),
                                   input_grads[0]->nbytes(), cudaMemcpyDeviceToDevice, cuda::stream(ctx)),
                   "cudaMemcpyAsync", __FILE__, __LINE__);
}

}  // namespace plexus::layers

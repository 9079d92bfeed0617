// CUDA kernels of RateLoss (math in rate_loss.h).
#include <algorithm>
#include <cmath>

#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/tensor_ops.h"
#include "rate_loss/rate_loss.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;
// A reduction needs only enough blocks to fill the GPU; more would just add atomics.
constexpr unsigned int kMaxReductionBlocks = 1024;

// R = sum_i -log2(p_i) / (N H W) = -sum_i ln(p_i) * scale, scale = 1 / (ln 2 N H W).
// Grid-stride partial sums per thread, a shared-memory block sum, then one
// atomicAdd per block into *rate, which the host zeroed on the same stream.
template <typename T>
__global__ void rate_loss_forward(const T* p, long long n, T scale, T* rate) {
  T sum = T(0);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    sum -= log(p[i]);
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) atomicAdd(rate, sum * scale);
}

// dR/dp_i = -dy / (p_i ln 2 N H W) = -dy * scale / p_i; dy is the scalar
// output gradient, read on the device. One thread per element, grid-stride.
template <typename T>
__global__ void rate_loss_backward(const T* p, const T* dy, long long n, T scale, T* dp) {
  const T numerator = -dy[0] * scale;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dp[i] = numerator / p[i];
}

}  // namespace

void RateLoss::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const std::size_t image = inputs.size() - 1;
  const double scale = 1.0 / (std::log(2.0) * static_cast<double>(rate_loss_pixel_count(*inputs[image])));
  // Zeroed by a kernel on the context's stream, not a memset: in the CUDA
  // graph of a training step a memset node runs on a stream of its own, and
  // the loss kernel waited on it.
  cuda::fill(ctx, *outputs[0], 0.0);
  for (std::size_t k = 0; k < image; ++k) {
    const long long n = inputs[k]->numel();
    if (n == 0) continue;
    dispatch_float(inputs[k]->dtype(), [&](auto zero) {
      using T = decltype(zero);
      const unsigned int blocks = std::min(cuda::blocks_for(n, kThreads), kMaxReductionBlocks);
      rate_loss_forward<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(inputs[k]->data<T>(), n, static_cast<T>(scale),
                                                                       outputs[0]->data<T>());
      cuda::check_launch("rate_loss_forward", __FILE__, __LINE__);
    });
  }
}

void RateLoss::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const std::size_t image = inputs.size() - 1;
  if (input_grads.size() > image && input_grads[image])
    cuda::check_cuda(
        cudaMemsetAsync(input_grads[image]->raw_data(), 0, input_grads[image]->nbytes(), cuda::stream(ctx)),
        "cudaMemsetAsync", __FILE__, __LINE__);
  const double scale = 1.0 / (std::log(2.0) * static_cast<double>(rate_loss_pixel_count(*inputs[image])));
  for (std::size_t k = 0; k < image; ++k) {
    const long long n = inputs[k]->numel();
    if (!input_grads[k] || n == 0) continue;
    dispatch_float(inputs[k]->dtype(), [&](auto zero) {
      using T = decltype(zero);
      rate_loss_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
          inputs[k]->data<T>(), output_grads[0]->data<T>(), n, static_cast<T>(scale), input_grads[k]->data<T>());
      cuda::check_launch("rate_loss_backward", __FILE__, __LINE__);
    });
  }
}

}  // namespace plexus::layers

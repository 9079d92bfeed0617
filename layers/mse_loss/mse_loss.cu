// CUDA kernels of MSELoss (math in mse_loss.h).
#include <algorithm>

#include "convolution/scratch.h"
#include "mse_loss/mse_loss.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/tensor_ops.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;
// A reduction needs only enough blocks to fill the GPU; more would just add atomics.
constexpr unsigned int kMaxReductionBlocks = 1024;

// L = (1/n) sum_i (a_i - b_i)^2.
// Grid-stride partial sums per thread, a shared-memory block sum, then one
// atomicAdd per block into *loss, which the host zeroed on the same stream.
template <typename T>
__global__ void mse_loss_forward(const T* a, const T* b, long long n, T inverse_n, T* loss) {
  T sum = T(0);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T difference = a[i] - b[i];
    sum += difference * difference;
  }
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) atomicAdd(loss, sum * inverse_n);
}

// dL/da_i = dy * 2 (a_i - b_i) / n,  dL/db_i = -dL/da_i.  dy is the scalar
// output gradient, read on the device. One thread per element, grid-stride.
template <typename T>
__global__ void mse_loss_backward(const T* a, const T* b, const T* dy, long long n, T two_over_n, T* da, T* db) {
  const T scale = dy[0] * two_over_n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T gradient = scale * (a[i] - b[i]);
    if (da) da[i] = gradient;
    if (db) db[i] = -gradient;
  }
}

// Weighted (a third input, weights [N]); deterministic, no atomics.
// Partial sums of (a - b)^2 per sample: block blockIdx.x covers sample
// n = blockIdx.x / blocks_per_sample, part p = blockIdx.x % blocks_per_sample,
// its threads striding over that sample's elements; partials[n, p] = the block sum.
template <typename T>
__global__ void mse_loss_sample_partials(const T* a, const T* b, long long per_sample, int blocks_per_sample,
                                         T* partials) {
  const long long n = blockIdx.x / blocks_per_sample;
  const int part = blockIdx.x % blocks_per_sample;
  const T* a_n = a + n * per_sample;
  const T* b_n = b + n * per_sample;
  T sum = T(0);
  for (long long i = part * (long long)blockDim.x + threadIdx.x; i < per_sample;
       i += (long long)blocks_per_sample * blockDim.x) {
    T difference = a_n[i] - b_n[i];
    sum += difference * difference;
  }
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// The squared error of sample n: its partials summed in order.
template <typename T>
__device__ T sample_squared_error(const T* partials, long long n, int blocks_per_sample) {
  T sum = T(0);
  for (int p = 0; p < blocks_per_sample; ++p) sum += partials[n * blocks_per_sample + p];
  return sum;
}

// L = (1/n) sum_m w_m E_m, E_m the squared error of sample m. One block;
// thread j takes samples j, j + blockDim, ... then a block sum.
template <typename T>
__global__ void mse_loss_weighted_total(const T* partials, const T* weights, long long samples, int blocks_per_sample,
                                        T inverse_n, T* loss) {
  T sum = T(0);
  for (long long m = threadIdx.x; m < samples; m += blockDim.x)
    sum += weights[m] * sample_squared_error(partials, m, blocks_per_sample);
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) loss[0] = sum * inverse_n;
}

// dL/da_i = dy * 2 w_batch(i) (a_i - b_i) / n,  dL/db_i = -dL/da_i. One thread per element, grid-stride.
template <typename T>
__global__ void mse_loss_weighted_backward(const T* a, const T* b, const T* weights, const T* dy, long long n,
                                           long long per_sample, T two_over_n, T* da, T* db) {
  const T scale = dy[0] * two_over_n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T gradient = scale * weights[i / per_sample] * (a[i] - b[i]);
    if (da) da[i] = gradient;
    if (db) db[i] = -gradient;
  }
}

// dL/dw_m = dy * E_m / n. One thread per sample.
template <typename T>
__global__ void mse_loss_weights_backward(const T* partials, const T* dy, long long samples, int blocks_per_sample,
                                          T inverse_n, T* dweights) {
  const T scale = dy[0] * inverse_n;
  for (long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x; m < samples;
       m += (long long)gridDim.x * blockDim.x)
    dweights[m] = scale * sample_squared_error(partials, m, blocks_per_sample);
}

// Blocks per sample for the partial sums: enough to fill the GPU (about
// kMaxReductionBlocks in all) without blocks that have fewer elements than threads.
int blocks_per_sample(long long samples, long long per_sample) {
  const long long by_size = (per_sample + kThreads - 1) / kThreads;
  const long long by_total = std::max(1LL, static_cast<long long>(kMaxReductionBlocks) / samples);
  return static_cast<int>(std::max(1LL, std::min(by_size, by_total)));
}

// partials [N, blocks per sample] of (a - b)^2, in the layer's scratch tensor.
template <typename T>
const T* launch_sample_partials(Context& ctx, const Tensor& a, const Tensor& b, int parts, Tensor& cache) {
  const long long samples = a.dim(0), per_sample = a.numel() / samples;
  Tensor& partials = scratch_tensor(cache, {static_cast<std::int64_t>(samples), static_cast<std::int64_t>(parts)},
                                    a.dtype(), a.device());
  mse_loss_sample_partials<T><<<static_cast<unsigned int>(samples * parts), kThreads, 0, cuda::stream(ctx)>>>(
      a.data<T>(), b.data<T>(), per_sample, parts, partials.data<T>());
  cuda::check_launch("mse_loss_sample_partials", __FILE__, __LINE__);
  return partials.data<T>();
}

}  // namespace

void MSELoss::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  if (inputs.size() == 3) {
    forward_weighted_cuda(ctx, inputs, outputs);
    return;
  }
  // Zeroed by a kernel on the context's stream, not a memset: in the CUDA
  // graph of a training step a memset node runs on a stream of its own, and
  // the loss kernel waited on it.
  cuda::fill(ctx, *outputs[0], 0.0);
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const unsigned int blocks = std::min(cuda::blocks_for(n, kThreads), kMaxReductionBlocks);
    mse_loss_forward<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(inputs[0]->data<T>(), inputs[1]->data<T>(), n,
                                                                    T(1) / static_cast<T>(n), outputs[0]->data<T>());
    cuda::check_launch("mse_loss_forward", __FILE__, __LINE__);
  });
}

void MSELoss::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (inputs.size() == 3) {
    backward_weighted_cuda(ctx, inputs, outputs, output_grads, input_grads);
    return;
  }
  const long long n = inputs[0]->numel();
  if (!input_grads[0] && !input_grads[1]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* da = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    T* db = input_grads[1] ? input_grads[1]->data<T>() : nullptr;
    mse_loss_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), output_grads[0]->data<T>(), n, T(2) / static_cast<T>(n), da, db);
    cuda::check_launch("mse_loss_backward", __FILE__, __LINE__);
  });
}

// Weighted: per-sample partial sums, then one block forms the weighted mean.
void MSELoss::forward_weighted_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& a = *inputs[0];
  const long long n = a.numel(), samples = a.dim(0);
  const int parts = blocks_per_sample(samples, n / samples);
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* partials = launch_sample_partials<T>(ctx, a, *inputs[1], parts, sample_partials_);
    mse_loss_weighted_total<T><<<1, kThreads, 0, cuda::stream(ctx)>>>(partials, inputs[2]->data<T>(), samples, parts,
                                                                      T(1) / static_cast<T>(n), outputs[0]->data<T>());
    cuda::check_launch("mse_loss_weighted_total", __FILE__, __LINE__);
  });
}

void MSELoss::backward_weighted_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& a = *inputs[0];
  const long long n = a.numel(), samples = a.dim(0), per_sample = n / samples;
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* dy = output_grads[0]->data<T>();
    if (input_grads[0] || input_grads[1]) {
      mse_loss_weighted_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
          a.data<T>(), inputs[1]->data<T>(), inputs[2]->data<T>(), dy, n, per_sample, T(2) / static_cast<T>(n),
          input_grads[0] ? input_grads[0]->data<T>() : nullptr, input_grads[1] ? input_grads[1]->data<T>() : nullptr);
      cuda::check_launch("mse_loss_weighted_backward", __FILE__, __LINE__);
    }
    if (input_grads[2]) {
      const int parts = blocks_per_sample(samples, per_sample);
      const T* partials = launch_sample_partials<T>(ctx, a, *inputs[1], parts, sample_partials_);
      mse_loss_weights_backward<T><<<cuda::blocks_for(samples, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
          partials, dy, samples, parts, T(1) / static_cast<T>(n), input_grads[2]->data<T>());
      cuda::check_launch("mse_loss_weights_backward", __FILE__, __LINE__);
    }
  });
}

}  // namespace plexus::layers

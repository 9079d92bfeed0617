// CUDA kernels of MSELoss (math in mse_loss.h).
#include <algorithm>

#include "mse_loss/mse_loss.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

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
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T difference = a[i] - b[i];
    sum += difference * difference;
  }
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) atomicAdd(loss, sum * inverse_n);
}

// dL/da_i = dy * 2 (a_i - b_i) / n,  dL/db_i = -dL/da_i.  dy is the scalar
// output gradient, read on the device. One thread per element, grid-stride.
template <typename T>
__global__ void mse_loss_backward(const T* a, const T* b, const T* dy, long long n, T two_over_n, T* da,
                                  T* db) {
  const T scale = dy[0] * two_over_n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T gradient = scale * (a[i] - b[i]);
    if (da) da[i] = gradient;
    if (db) db[i] = -gradient;
  }
}

}  // namespace

void MSELoss::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  cuda::check_cuda(cudaMemsetAsync(outputs[0]->raw_data(), 0, outputs[0]->nbytes(), cuda::stream(ctx)),
                   "cudaMemsetAsync", __FILE__, __LINE__);
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const unsigned int blocks = std::min(cuda::blocks_for(n, kThreads), kMaxReductionBlocks);
    mse_loss_forward<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), n, T(1) / static_cast<T>(n), outputs[0]->data<T>());
    cuda::check_launch("mse_loss_forward", __FILE__, __LINE__);
  });
}

void MSELoss::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = inputs[0]->numel();
  if (!input_grads[0] && !input_grads[1]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* da = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    T* db = input_grads[1] ? input_grads[1]->data<T>() : nullptr;
    mse_loss_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), output_grads[0]->data<T>(), n, T(2) / static_cast<T>(n),
        da, db);
    cuda::check_launch("mse_loss_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

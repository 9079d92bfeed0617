// CUDA gradient-norm clipping (formula in plexus/grad_clip.h): per gradient, a
// fixed grid of blocks writes partial sums of squares; one block adds them in
// order and computes the norm and factor; each gradient is scaled by the
// factor read from device memory. No host synchronisation, same result every run.
#include "../grad_clip_kernels.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace plexus::cuda {

namespace {

constexpr int kThreads = 256;

// partials[blockIdx.x] = sum of g[i]^2 over the block's grid-stride share.
template <typename T>
__global__ void sum_squares_kernel(const T* g, long long n, double* partials) {
  double sum = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    sum += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  sum = block_sum<kThreads>(sum);  // valid in thread 0
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// result[0] = sqrt(sum of partials); result[1] = min(1, max_norm / (result[0] + 1e-6)).
__global__ void clip_factor_kernel(const double* partials, int count, double max_norm, double* result) {
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum<kThreads>(sum);
  if (threadIdx.x == 0) {
    const double norm = sqrt(sum);
    result[0] = norm;
    result[1] = fmin(1.0, max_norm / (norm + 1e-6));
  }
}

// g *= result[1]
template <typename T>
__global__ void scale_kernel(T* g, long long n, const double* result) {
  const double factor = result[1];
  if (factor >= 1.0) return;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    g[i] = static_cast<T>(g[i] * factor);
}

}  // namespace

void clip_gradients(Context& ctx, const std::vector<Tensor*>& grads, double max_norm, Tensor& partials,
                    Tensor& result) {
  double* partial_data = partials.data<double>();
  for (std::size_t k = 0; k < grads.size(); ++k) {
    Tensor& g = *grads[k];
    // A fixed grid (not sized by n) so the summation order never changes.
    dispatch_float(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      sum_squares_kernel<T><<<kClipPartialBlocks, kThreads, 0, stream(ctx)>>>(
          g.data<T>(), static_cast<long long>(g.numel()), partial_data + k * kClipPartialBlocks);
      check_launch("sum_squares_kernel", __FILE__, __LINE__);
    });
  }
  // One block: the partials are few (64 per parameter tensor).
  clip_factor_kernel<<<1, kThreads, 0, stream(ctx)>>>(
      partial_data, static_cast<int>(grads.size()) * kClipPartialBlocks, max_norm, result.data<double>());
  check_launch("clip_factor_kernel", __FILE__, __LINE__);
  for (Tensor* g : grads) {
    const long long n = g->numel();
    if (n == 0) continue;
    dispatch_float(g->dtype(), [&](auto zero) {
      using T = decltype(zero);
      scale_kernel<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(g->data<T>(), n, result.data<double>());
      check_launch("scale_kernel", __FILE__, __LINE__);
    });
  }
}

}  // namespace plexus::cuda

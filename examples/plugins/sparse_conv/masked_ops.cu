// The CUDA halves of masked_ops.h.
#include "masked_ops.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace sparse_conv::cuda {

namespace {

constexpr int kThreads = 256;

// y_i = x_i m_i (y may be x). One thread per element, grid-stride: any size fits.
template <typename T>
__global__ void multiply_by_mask_kernel(const T* x, const T* m, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] * m[i];
}

// y_i += x_i m_i. Same layout.
template <typename T>
__global__ void accumulate_masked_kernel(const T* x, const T* m, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] += x[i] * m[i];
}

}  // namespace

void multiply_by_mask(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out) {
  if (a.numel() == 0) return;
  plexus::dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    multiply_by_mask_kernel<T><<<plexus::cuda::blocks_for(a.numel(), kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
        a.data<T>(), mask.data<T>(), out.data<T>(), a.numel());
    plexus::cuda::check_launch("multiply_by_mask_kernel", __FILE__, __LINE__);
  });
}

void accumulate_masked(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out) {
  if (a.numel() == 0) return;
  plexus::dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    accumulate_masked_kernel<T><<<plexus::cuda::blocks_for(a.numel(), kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
        a.data<T>(), mask.data<T>(), out.data<T>(), a.numel());
    plexus::cuda::check_launch("accumulate_masked_kernel", __FILE__, __LINE__);
  });
}

}  // namespace sparse_conv::cuda

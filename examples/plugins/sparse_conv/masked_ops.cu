// The CUDA halves of masked_ops.h.
#include "masked_ops.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace sparse_conv::cuda {

namespace {

constexpr int kThreads = 256;

// y_i = x_i m_i, or y_i += x_i m_i when accumulating (y may be x). One thread
// per element, grid-stride: any size fits.
template <typename T>
__global__ void masked_product_kernel(const T* x, const T* m, T* y, long long n, bool accumulate) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = accumulate ? y[i] + x[i] * m[i] : x[i] * m[i];
}

}  // namespace

void masked_product(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out,
                    MaskedWrite write) {
  if (a.numel() == 0) return;
  plexus::dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    masked_product_kernel<T><<<plexus::cuda::blocks_for(a.numel(), kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
        a.data<T>(), mask.data<T>(), out.data<T>(), a.numel(), write == MaskedWrite::accumulate);
    plexus::cuda::check_launch("masked_product_kernel", __FILE__, __LINE__);
  });
}

}  // namespace sparse_conv::cuda

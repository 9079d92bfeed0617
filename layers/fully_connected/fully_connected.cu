// CUDA kernels of FullyConnected (math in fully_connected.h). Forward is a
// cuBLAS product plus a bias kernel; backward is the shared dense backward
// (dense.cu).
#include "fully_connected/dense.h"
#include "fully_connected/fully_connected.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// Y[n, o] += b[o] over the row-major Y [N, out].
// Element-wise: one thread per element of Y, grid-stride so any size fits.
template <typename T>
__global__ void add_bias(T* y, const T* b, long long n, long long out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] += b[i % out];
}

}  // namespace

void FullyConnected::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  const int batch = dense::cublas_size(input.dim(0), "batch", who());
  const int features = dense::cublas_size(in_features_, "features", who());
  const int out = dense::cublas_size(out_features_, "out_features", who());
  if (batch == 0) return;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* y = outputs[0]->data<T>();
    // Y [N, out] = X [N, F] * W^T (W stored [out, F]).
    cuda::gemm<T>(ctx, false, true, batch, out, features, T(1), input.data<T>(), parameter("weight").value.data<T>(),
                  T(0), y);
    if (bias_) {
      long long n = static_cast<long long>(batch) * out;
      add_bias<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(y, parameter("bias").value.data<T>(), n, out);
      cuda::check_launch("add_bias", __FILE__, __LINE__);
    }
  });
}

void FullyConnected::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                   const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& input = *inputs[0];
  const int batch = dense::cublas_size(input.dim(0), "batch", who());
  const int features = dense::cublas_size(in_features_, "features", who());
  const int out = dense::cublas_size(out_features_, "out_features", who());
  if (batch == 0) return;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    dense::backward_cuda<T>(ctx, input.data<T>(), weight.value.data<T>(), output_grads[0]->data<T>(), out,
                            input_grads[0] ? input_grads[0]->data<T>() : nullptr, weight.grad.data<T>(),
                            bias_ ? parameter("bias").grad.data<T>() : nullptr, batch, features, out);
  });
}

}  // namespace plexus::layers

// CUDA kernels of FullyConnected (math in fully_connected.h). The three
// matrix products go to cuBLAS (plexus/cuda/blas.h); the bias needs two small
// kernels of its own.
#include <climits>

#include "fully_connected/fully_connected.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kRowSlices = 8;

// Y[n, o] += b[o] over the row-major Y [N, out].
// Element-wise: one thread per element of Y, grid-stride so any size fits.
template <typename T>
__global__ void add_bias(T* y, const T* b, long long n, long long out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] += b[i % out];
}

// dL/db[o] += sum_n dL/dY[n, o].
// Blocks of 32 x 8 threads: x covers 32 adjacent columns (coalesced reads of
// each row), y splits the rows 8 ways; the partial sums meet in shared memory,
// so there are no atomics and the summation order is fixed.
template <typename T>
__global__ void accumulate_column_sums(const T* dy, T* db, long long rows, long long columns) {
  __shared__ T partial[kRowSlices][kColumnsPerBlock];
  long long column = blockIdx.x * (long long)kColumnsPerBlock + threadIdx.x;
  T sum = T(0);
  if (column < columns)
    for (long long row = threadIdx.y; row < rows; row += kRowSlices) sum += dy[row * columns + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    T total = T(0);
    for (int slice = 0; slice < kRowSlices; ++slice) total += partial[slice][threadIdx.x];
    db[column] += total;
  }
}

// cuBLAS takes int sizes.
int as_int(std::int64_t value, const char* what, const std::string& who) {
  if (value > INT_MAX)
    throw ShapeError(who + ": " + what + " " + std::to_string(value) + " exceeds the cuBLAS limit " +
                     std::to_string(INT_MAX));
  return static_cast<int>(value);
}

}  // namespace

void FullyConnected::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  const int batch = as_int(input.dim(0), "batch", who());
  const int features = as_int(in_features_, "features", who());
  const int out = as_int(out_features_, "out_features", who());
  if (batch == 0) return;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* y = outputs[0]->data<T>();
    // Y [N, out] = X [N, F] * W^T (W stored [out, F]).
    cuda::gemm<T>(ctx, false, true, batch, out, features, T(1), input.data<T>(),
                  parameter("weight").value.data<T>(), T(0), y);
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
  const int batch = as_int(input.dim(0), "batch", who());
  const int features = as_int(in_features_, "features", who());
  const int out = as_int(out_features_, "out_features", who());
  if (batch == 0) return;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* dy = output_grads[0]->data<T>();
    Parameter& weight = parameter("weight");
    // dX [N, F] = dY [N, out] * W [out, F]   (overwrites)
    if (input_grads[0])
      cuda::gemm<T>(ctx, false, false, batch, features, out, T(1), dy, weight.value.data<T>(), T(0),
                    input_grads[0]->data<T>());
    // dW [out, F] += dY^T [out, N] * X [N, F]   (beta = 1 accumulates)
    cuda::gemm<T>(ctx, true, false, out, features, batch, T(1), dy, input.data<T>(), T(1),
                  weight.grad.data<T>());
    if (bias_) {
      dim3 threads(kColumnsPerBlock, kRowSlices);
      unsigned int blocks = static_cast<unsigned int>((out + kColumnsPerBlock - 1) / kColumnsPerBlock);
      accumulate_column_sums<T><<<blocks, threads, 0, cuda::stream(ctx)>>>(dy, parameter("bias").grad.data<T>(),
                                                                           batch, out);
      cuda::check_launch("accumulate_column_sums", __FILE__, __LINE__);
    }
  });
}

}  // namespace plexus::layers

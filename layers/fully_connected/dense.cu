// CUDA half of the dense backward (math in dense.h): the two matrix products
// go to cuBLAS (plexus/cuda/blas.h); the bias gradient is a column sum.
#include <climits>

#include "fully_connected/dense.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers::dense {

namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kRowSlices = 8;

// db[c] += sum_r dy[r, c] over the row-major dy [rows, columns], rows `stride` apart.
// Blocks of 32 x 8 threads: x covers 32 adjacent columns (coalesced reads of
// each row), y splits the rows 8 ways; the partial sums meet in shared memory,
// so there are no atomics and the summation order is fixed.
template <typename T>
__global__ void accumulate_column_sums(const T* dy, T* db, long long rows, long long columns, long long stride) {
  __shared__ T partial[kRowSlices][kColumnsPerBlock];
  long long column = blockIdx.x * (long long)kColumnsPerBlock + threadIdx.x;
  T sum = T(0);
  if (column < columns)
    for (long long row = threadIdx.y; row < rows; row += kRowSlices) sum += dy[row * stride + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    T total = T(0);
    for (int slice = 0; slice < kRowSlices; ++slice) total += partial[slice][threadIdx.x];
    db[column] += total;
  }
}

}  // namespace

int cublas_size(std::int64_t value, const char* what, const std::string& who) {
  if (value > INT_MAX)
    throw ShapeError(who + ": " + what + " " + std::to_string(value) + " exceeds the cuBLAS limit " +
                     std::to_string(INT_MAX));
  return static_cast<int>(value);
}

template <typename T>
void backward_cuda(const Context& ctx, const T* x, const T* w, const T* dy, int dy_stride, T* dx, T* dw, T* db,
                   int batch, int in, int out) {
  if (dy_stride < out)
    throw Error("dense::backward_cuda: dy row stride " + std::to_string(dy_stride) + " is below its " +
                std::to_string(out) + " columns");
  // dX [N, in] = dY [N, out] * W [out, in]   (overwrites)
  if (dx) cuda::gemm<T>(ctx, false, false, batch, in, out, T(1), dy, dy_stride, w, in, T(0), dx, in);
  // dW [out, in] += dY^T [out, N] * X [N, in]   (beta = 1 accumulates)
  cuda::gemm<T>(ctx, true, false, out, in, batch, T(1), dy, dy_stride, x, in, T(1), dw, in);
  if (db) {
    dim3 threads(kColumnsPerBlock, kRowSlices);
    unsigned int blocks = static_cast<unsigned int>((out + kColumnsPerBlock - 1) / kColumnsPerBlock);
    accumulate_column_sums<T><<<blocks, threads, 0, cuda::stream(ctx)>>>(dy, db, batch, out, dy_stride);
    cuda::check_launch("accumulate_column_sums", __FILE__, __LINE__);
  }
}

template void backward_cuda<float>(const Context&, const float*, const float*, const float*, int, float*, float*,
                                   float*, int, int, int);
template void backward_cuda<double>(const Context&, const double*, const double*, const double*, int, double*, double*,
                                    double*, int, int, int);

}  // namespace plexus::layers::dense

// CUDA kernels of SoftmaxProjection (math in softmax_projection.h). The
// projections go to cuBLAS (plexus/cuda/blas.h); the log-softmax, the loss
// and dz are row kernels, one block per batch row.
#include <climits>
#include <cmath>

#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "softmax_projection/softmax_projection.h"

namespace plexus::layers {

namespace {

constexpr int kRowThreads = 256;  // a power of two: block_reduce halves it
constexpr int kColumnsPerBlock = 32;
constexpr int kRowSlices = 8;

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }
__device__ inline float floor_of(float x) { return floorf(x); }
__device__ inline double floor_of(double x) { return floor(x); }

struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// Combines every thread's `value` with `op` (tree order, so deterministic);
// every thread of the block gets the result. blockDim.x must be kRowThreads.
template <typename T, typename Op>
__device__ T block_reduce(T value, T* scratch, Op op) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] = op(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    __syncthreads();
  }
  T result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

// The class index y_n, or -1 when y_n is not an integer in [0, V) (NaN included).
template <typename T>
__device__ long long label_index(T label, long long vocab) {
  if (!(label >= T(0) && label < T(vocab) && floor_of(label) == label)) return -1;
  return static_cast<long long>(label);
}

// Per row n of z = f W^T (+ b, added here on read):
//   m_n = max_v z[n, v],  loss_n = m_n + log sum_v exp(z[n, v] - m_n) - z[n, y_n]  (= -log p[n, y_n])
// and a bad label y_n sets *bad_label = max(*bad_label, N - n), so the host
// finds the first bad row as N - *bad_label (0: none).
// One block of kRowThreads per row (grid-stride over rows): the threads split
// the V logits and meet in shared-memory reductions.
template <typename T>
__global__ void row_losses(const T* z, const T* b, const T* labels, long long rows, long long vocab,
                           T* losses, int* bad_label) {
  __shared__ T scratch[kRowThreads];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T* row = z + n * vocab;
    T local_max = -INFINITY;
    for (long long v = threadIdx.x; v < vocab; v += kRowThreads) {
      T value = row[v] + (b ? b[v] : T(0));
      local_max = value > local_max ? value : local_max;
    }
    T row_max = block_reduce(local_max, scratch, MaxOp{});
    T local_sum = T(0);
    for (long long v = threadIdx.x; v < vocab; v += kRowThreads)
      local_sum += exp_of(row[v] + (b ? b[v] : T(0)) - row_max);
    T sum = block_reduce(local_sum, scratch, SumOp{});
    if (threadIdx.x == 0) {
      long long label = label_index(labels[n], vocab);
      if (label < 0) {
        atomicMax(bad_label, static_cast<int>(rows - n));
        losses[n] = T(0);
      } else {
        losses[n] = row_max + log_of(sum) - (row[label] + (b ? b[label] : T(0)));
      }
    }
  }
}

// L = (1/N) sum_n loss_n. A single block: N is a batch size, and one block
// sums in a fixed order, so the loss is reproducible.
template <typename T>
__global__ void mean_loss(const T* losses, long long rows, T* loss) {
  __shared__ T scratch[kRowThreads];
  T local_sum = T(0);
  for (long long n = threadIdx.x; n < rows; n += kRowThreads) local_sum += losses[n];
  T sum = block_reduce(local_sum, scratch, SumOp{});
  if (threadIdx.x == 0) *loss = sum / T(rows);
}

// In place over z = f W^T (b added on read), with g = *output_grad:
//   dz[n, v] = (g/N) (exp(z[n, v] - m_n) / sum_u exp(z[n, u] - m_n) - [v == y_n])
// A bad label contributes no one-hot term (forward has already refused it).
// One block of kRowThreads per row, as in row_losses.
template <typename T>
__global__ void logit_gradients(T* z, const T* b, const T* labels, const T* output_grad, long long rows,
                                long long vocab) {
  __shared__ T scratch[kRowThreads];
  const T scale = *output_grad / T(rows);
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    T* row = z + n * vocab;
    T local_max = -INFINITY;
    for (long long v = threadIdx.x; v < vocab; v += kRowThreads) {
      T value = row[v] + (b ? b[v] : T(0));
      local_max = value > local_max ? value : local_max;
    }
    T row_max = block_reduce(local_max, scratch, MaxOp{});
    T local_sum = T(0);
    for (long long v = threadIdx.x; v < vocab; v += kRowThreads)
      local_sum += exp_of(row[v] + (b ? b[v] : T(0)) - row_max);
    T sum = block_reduce(local_sum, scratch, SumOp{});
    long long label = label_index(labels[n], vocab);
    for (long long v = threadIdx.x; v < vocab; v += kRowThreads) {
      T probability = exp_of(row[v] + (b ? b[v] : T(0)) - row_max) / sum;
      row[v] = scale * (probability - (v == label ? T(1) : T(0)));
    }
  }
}

// dL/db[v] += sum_n dz[n, v].
// Blocks of 32 x 8 threads: x covers 32 adjacent columns (coalesced reads of
// each row), y splits the rows 8 ways; the partial sums meet in shared memory,
// so there are no atomics and the summation order is fixed.
template <typename T>
__global__ void accumulate_column_sums(const T* dz, T* db, long long rows, long long columns) {
  __shared__ T partial[kRowSlices][kColumnsPerBlock];
  long long column = blockIdx.x * (long long)kColumnsPerBlock + threadIdx.x;
  T sum = T(0);
  if (column < columns)
    for (long long row = threadIdx.y; row < rows; row += kRowSlices) sum += dz[row * columns + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    T total = T(0);
    for (int slice = 0; slice < kRowSlices; ++slice) total += partial[slice][threadIdx.x];
    db[column] += total;
  }
}

// cuBLAS takes int sizes (and the bad-label flag is an int).
int as_int(std::int64_t value, const char* what, const std::string& who) {
  if (value > INT_MAX)
    throw ShapeError(who + ": " + what + " " + std::to_string(value) + " exceeds the cuBLAS limit " +
                     std::to_string(INT_MAX));
  return static_cast<int>(value);
}

unsigned int row_blocks(int rows) { return static_cast<unsigned int>(rows < 65535 ? rows : 65535); }

}  // namespace

void SoftmaxProjection::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  const int batch = as_int(input.dim(0), "batch", who());
  const int features = as_int(in_features_, "features", who());
  const int vocab = as_int(vocab_size_, "vocab_size", who());
  cudaStream_t stream = cuda::stream(ctx);
  Tensor logits({batch, vocab}, input.dtype(), input.device());
  Tensor row_loss({batch}, input.dtype(), input.device());
  Tensor flag({1}, DType::f32, input.device());  // 4 zeroed bytes: the int bad-label flag
  int* bad_label = static_cast<int*>(flag.raw_data());
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* b = bias_ ? parameter("bias").value.data<T>() : nullptr;
    // z [N, V] = f [N, F] * W^T (W stored [V, F]); b is added by the row kernel.
    cuda::gemm<T>(ctx, false, true, batch, vocab, features, T(1), input.data<T>(),
                  parameter("weight").value.data<T>(), T(0), logits.data<T>());
    row_losses<T><<<row_blocks(batch), kRowThreads, 0, stream>>>(logits.data<T>(), b, inputs[1]->data<T>(), batch,
                                                                 vocab, row_loss.data<T>(), bad_label);
    cuda::check_launch("row_losses", __FILE__, __LINE__);
    mean_loss<T><<<1, kRowThreads, 0, stream>>>(row_loss.data<T>(), batch, outputs[0]->data<T>());
    cuda::check_launch("mean_loss", __FILE__, __LINE__);
  });
  int host_flag = 0;
  cuda::check_cuda(cudaMemcpyAsync(&host_flag, bad_label, sizeof(int), cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync", __FILE__, __LINE__);
  cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", __FILE__, __LINE__);
  if (host_flag != 0) {
    std::int64_t index = batch - host_flag;
    fail_label(index, inputs[1]->to_values()[static_cast<std::size_t>(index)]);
  }
}

void SoftmaxProjection::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                      const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& input = *inputs[0];
  const int batch = as_int(input.dim(0), "batch", who());
  const int features = as_int(in_features_, "features", who());
  const int vocab = as_int(vocab_size_, "vocab_size", who());
  cudaStream_t stream = cuda::stream(ctx);
  Tensor logit_grads({batch, vocab}, input.dtype(), input.device());
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    const T* b = bias_ ? parameter("bias").value.data<T>() : nullptr;
    T* dz = logit_grads.data<T>();
    // Recompute z = f W^T (the layer keeps no state between forward and backward).
    cuda::gemm<T>(ctx, false, true, batch, vocab, features, T(1), input.data<T>(), weight.value.data<T>(), T(0), dz);
    logit_gradients<T><<<row_blocks(batch), kRowThreads, 0, stream>>>(dz, b, inputs[1]->data<T>(),
                                                                      output_grads[0]->data<T>(), batch, vocab);
    cuda::check_launch("logit_gradients", __FILE__, __LINE__);
    // df [N, F] = dz [N, V] * W [V, F]   (overwrites)
    if (input_grads[0])
      cuda::gemm<T>(ctx, false, false, batch, features, vocab, T(1), dz, weight.value.data<T>(), T(0),
                    input_grads[0]->data<T>());
    // dW [V, F] += dz^T [V, N] * f [N, F]   (beta = 1 accumulates)
    cuda::gemm<T>(ctx, true, false, vocab, features, batch, T(1), dz, input.data<T>(), T(1), weight.grad.data<T>());
    if (bias_) {
      dim3 threads(kColumnsPerBlock, kRowSlices);
      unsigned int blocks = static_cast<unsigned int>((vocab + kColumnsPerBlock - 1) / kColumnsPerBlock);
      accumulate_column_sums<T><<<blocks, threads, 0, stream>>>(dz, parameter("bias").grad.data<T>(), batch, vocab);
      cuda::check_launch("accumulate_column_sums", __FILE__, __LINE__);
    }
  });
}

}  // namespace plexus::layers

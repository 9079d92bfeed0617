// CUDA kernels of SoftmaxProjection (math in softmax_projection.h). The
// projections go to cuBLAS (plexus/cuda/blas.h); the log-softmax, the loss
// and dz are row kernels, one block per batch row. The logits live in a
// [N, V_pad] buffer (V_pad = V rounded up to a multiple of 8); the row kernels
// read only its first V columns (the padding is never part of a softmax).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "fully_connected/dense.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "softmax_projection/softmax_projection.h"

namespace plexus::layers {

namespace {

constexpr int kRowThreads = 256;  // a power of two: block_reduce halves it

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }
__device__ inline float floor_of(float x) { return floorf(x); }
__device__ inline double floor_of(double x) { return floor(x); }

struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
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

// Per row n of z = f W^T (+ b, added here on read), rows `stride` apart:
//   m_n = max_v z[n, v],  loss_n = m_n + log sum_v exp(z[n, v] - m_n) - z[n, y_n]  (= -log p[n, y_n])
// and a bad label y_n sets *bad_label = max(*bad_label, N - n), so the host
// finds the first bad row as N - *bad_label (0: none).
// One block of kRowThreads per row (grid-stride over rows): the threads split
// the V logits and meet in shared-memory reductions.
template <typename T>
__global__ void row_losses(const T* z, long long stride, const T* b, const T* labels, long long rows, long long vocab,
                           T* losses, int* bad_label) {
  __shared__ T scratch[kRowThreads];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T* row = z + n * stride;
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

// In place over z = f W^T (b added on read), rows `stride` apart, with g = *output_grad:
//   dz[n, v] = (g/N) (exp(z[n, v] - m_n) / sum_u exp(z[n, u] - m_n) - [v == y_n])   for v < V
//   dz[n, v] = 0                                                                    for V <= v < stride
// (the padding is zeroed so that no product over the padded width can pick up
// stale logits). A bad label contributes no one-hot term (forward has already
// refused it). One block of kRowThreads per row, as in row_losses.
template <typename T>
__global__ void logit_gradients(T* z, long long stride, const T* b, const T* labels, const T* output_grad,
                                long long rows, long long vocab) {
  __shared__ T scratch[kRowThreads];
  const T scale = *output_grad / T(rows);
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    T* row = z + n * stride;
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
    for (long long v = vocab + threadIdx.x; v < stride; v += kRowThreads) row[v] = T(0);
  }
}

unsigned int row_blocks(int rows) { return static_cast<unsigned int>(rows < 65535 ? rows : 65535); }

// The logits' row stride: V rounded up to a multiple of 8 floats (32 bytes),
// so every row starts 32-byte aligned, as tensor-core GEMM tiles want of C.
int padded_vocab(int vocab, const std::string& who) {
  return dense::cublas_size((static_cast<std::int64_t>(vocab) + 7) / 8 * 8, "padded vocab_size", who);
}

// The weight as the projections read it: W [V, F] itself, or, under bf16
// products with V not a multiple of 8, a copy zero-padded to [V_pad, F]
// (kept alive by `padded`), so that the products run over V_pad logit
// columns: cuBLAS's bf16 z = f W^T and df = dz W are faster over V_pad
// columns by far more than the copy costs (docs/performance.md); at f32 and
// tf32 the padded weight gains nothing, so W is used as it is.
template <typename T>
const T* projection_weight(Context& ctx, const Tensor& weight, int vocab, int stride, int features, Tensor& padded) {
  if (!std::is_same_v<T, float> || !ctx.bf16_products() || stride == vocab) return weight.data<T>();
  padded = Tensor({stride, features}, weight.dtype(), weight.device());  // rows >= V stay zero
  cuda::check_cuda(cudaMemcpyAsync(padded.raw_data(), weight.raw_data(), weight.nbytes(), cudaMemcpyDeviceToDevice,
                                   cuda::stream(ctx)),
                   "cudaMemcpyAsync", __FILE__, __LINE__);
  return padded.data<T>();
}

}  // namespace

void SoftmaxProjection::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  const int batch = dense::cublas_size(input.dim(0), "batch", who());
  const int features = dense::cublas_size(in_features_, "features", who());
  const int vocab = dense::cublas_size(vocab_size_, "vocab_size", who());
  const int stride = padded_vocab(vocab, who());
  cudaStream_t stream = cuda::stream(ctx);
  Tensor logits({batch, stride}, input.dtype(), input.device());
  Tensor row_loss({batch}, input.dtype(), input.device());
  Tensor flag({1}, DType::f32, input.device());  // 4 zeroed bytes: the int bad-label flag
  int* bad_label = static_cast<int*>(flag.raw_data());
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* b = bias_ ? parameter("bias").value.data<T>() : nullptr;
    Tensor padded;
    const T* w = projection_weight<T>(ctx, parameter("weight").value, vocab, stride, features, padded);
    const int columns = padded.defined() ? stride : vocab;
    // z [N, V] = f [N, F] * W^T (W stored [V, F]) into the first V (or, with
    // the padded weight, all V_pad: zeros past V) columns of the [N, V_pad]
    // buffer; b is added by the row kernel, which reads only the first V.
    cuda::gemm<T>(ctx, false, true, batch, columns, features, T(1), input.data<T>(), features, w, features, T(0),
                  logits.data<T>(), stride);
    row_losses<T><<<row_blocks(batch), kRowThreads, 0, stream>>>(logits.data<T>(), stride, b, inputs[1]->data<T>(),
                                                                 batch, vocab, row_loss.data<T>(), bad_label);
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
  const int batch = dense::cublas_size(input.dim(0), "batch", who());
  const int features = dense::cublas_size(in_features_, "features", who());
  const int vocab = dense::cublas_size(vocab_size_, "vocab_size", who());
  const int stride = padded_vocab(vocab, who());
  cudaStream_t stream = cuda::stream(ctx);
  Tensor logit_grads({batch, stride}, input.dtype(), input.device());
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    const T* b = bias_ ? parameter("bias").value.data<T>() : nullptr;
    T* dz = logit_grads.data<T>();
    Tensor padded;
    const T* w = projection_weight<T>(ctx, weight.value, vocab, stride, features, padded);
    const int columns = padded.defined() ? stride : vocab;
    // Recompute z = f W^T (the layer keeps no state between forward and backward).
    cuda::gemm<T>(ctx, false, true, batch, columns, features, T(1), input.data<T>(), features, w, features, T(0), dz,
                  stride);
    logit_gradients<T><<<row_blocks(batch), kRowThreads, 0, stream>>>(dz, stride, b, inputs[1]->data<T>(),
                                                                      output_grads[0]->data<T>(), batch, vocab);
    cuda::check_launch("logit_gradients", __FILE__, __LINE__);
    // df [N, F] = dz W over the same columns (dz and the padded weight are
    // zero past V, so the padding adds nothing).
    if (input_grads[0])
      cuda::gemm<T>(ctx, false, false, batch, features, columns, T(1), dz, stride, w, features, T(0),
                    input_grads[0]->data<T>(), features);
    // dW += dz^T f, db += column sums of dz: the dense backward on the first V
    // columns (W and b stay [V, F] and [V]).
    dense::backward_cuda<T>(ctx, input.data<T>(), weight.value.data<T>(), dz, stride, nullptr, weight.grad.data<T>(),
                            bias_ ? parameter("bias").grad.data<T>() : nullptr, batch, features, vocab);
  });
}

}  // namespace plexus::layers

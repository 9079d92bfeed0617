// CUDA kernels of Softmax (math in softmax.h), the input seen as [outer, L, inner].
// Two layouts of a softmax line:
// - contiguous (inner = 1, the last axis: attention's rows): one warp per line,
//   its lanes striding over the L elements and meeting in warp shuffles;
// - strided (inner > 1, channels of NCHW): one thread per line (o, i), so that
//   neighbouring threads read neighbouring elements at every step l.
// Every kernel grid-strides over the lines, so any count fits the capped grid.
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "softmax/softmax.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;  // whole warps: the contiguous kernels give each warp a line
constexpr int kWarp = 32;

__device__ inline float exponential(float x) { return expf(x); }
__device__ inline double exponential(double x) { return exp(x); }

template <typename T>
__device__ T larger(T a, T b) {
  return a > b ? a : b;
}

// The maximum and the sum of `value` over the 32 lanes of a warp, in every lane.
template <typename T>
__device__ T warp_max(T value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    value = larger(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}
template <typename T>
__device__ T warp_sum(T value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Contiguous lines: y[r, l] = exp(x[r, l] - m_r) / sum_l' exp(x[r, l'] - m_r),  m_r = max_l x[r, l].
// Every lane of a warp takes the same line, so the shuffles see whole warps.
template <typename T>
__global__ void softmax_rows_forward(const T* x, T* y, long long rows, long long length) {
  const int lane = threadIdx.x % kWarp;
  const long long warps = (long long)gridDim.x * blockDim.x / kWarp;
  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarp; r < rows; r += warps) {
    const T* x_row = x + r * length;
    T* y_row = y + r * length;
    T row_max = -INFINITY;
    for (long long l = lane; l < length; l += kWarp) row_max = larger(row_max, x_row[l]);
    row_max = warp_max(row_max);
    T sum = T(0);
    for (long long l = lane; l < length; l += kWarp) sum += exponential(x_row[l] - row_max);
    sum = warp_sum(sum);
    for (long long l = lane; l < length; l += kWarp) y_row[l] = exponential(x_row[l] - row_max) / sum;
  }
}

// Contiguous lines: dx[r, l] = y[r, l] * (dy[r, l] - sum_l' dy[r, l'] y[r, l']).
template <typename T>
__global__ void softmax_rows_backward(const T* y, const T* dy, T* dx, long long rows, long long length) {
  const int lane = threadIdx.x % kWarp;
  const long long warps = (long long)gridDim.x * blockDim.x / kWarp;
  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarp; r < rows; r += warps) {
    const long long first = r * length;
    T dot = T(0);
    for (long long l = lane; l < length; l += kWarp) dot += dy[first + l] * y[first + l];
    dot = warp_sum(dot);
    for (long long l = lane; l < length; l += kWarp) dx[first + l] = y[first + l] * (dy[first + l] - dot);
  }
}

// Strided lines: line (o, i) holds the elements o * L * inner + l * inner + i, l in [0, L);
// the same formula as softmax_rows_forward along it.
template <typename T>
__global__ void softmax_lines_forward(const T* x, T* y, long long outer, long long length, long long inner) {
  const long long lines = outer * inner;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < lines;
       t += (long long)gridDim.x * blockDim.x) {
    const long long first = (t / inner) * length * inner + t % inner;
    T line_max = -INFINITY;
    for (long long l = 0; l < length; ++l) line_max = larger(line_max, x[first + l * inner]);
    T sum = T(0);
    for (long long l = 0; l < length; ++l) sum += exponential(x[first + l * inner] - line_max);
    for (long long l = 0; l < length; ++l) y[first + l * inner] = exponential(x[first + l * inner] - line_max) / sum;
  }
}

// Strided lines: the formula of softmax_rows_backward along each line.
template <typename T>
__global__ void softmax_lines_backward(const T* y, const T* dy, T* dx, long long outer, long long length,
                                       long long inner) {
  const long long lines = outer * inner;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < lines;
       t += (long long)gridDim.x * blockDim.x) {
    const long long first = (t / inner) * length * inner + t % inner;
    T dot = T(0);
    for (long long l = 0; l < length; ++l) dot += dy[first + l * inner] * y[first + l * inner];
    for (long long l = 0; l < length; ++l) {
      const long long e = first + l * inner;
      dx[e] = y[e] * (dy[e] - dot);
    }
  }
}

}  // namespace

void Softmax::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Lines lines = lines_of(inputs[0]->shape());
  if (inputs[0]->numel() == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = inputs[0]->data<T>();
    T* y = outputs[0]->data<T>();
    if (lines.inner == 1) {
      softmax_rows_forward<T><<<cuda::blocks_for(lines.outer * kWarp, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
          x, y, lines.outer, lines.length);
      cuda::check_launch("softmax_rows_forward", __FILE__, __LINE__);
    } else {
      softmax_lines_forward<T>
          <<<cuda::blocks_for(lines.outer * lines.inner, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
              x, y, lines.outer, lines.length, lines.inner);
      cuda::check_launch("softmax_lines_forward", __FILE__, __LINE__);
    }
  });
}

void Softmax::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors& outputs,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  const Lines lines = lines_of(outputs[0]->shape());
  if (outputs[0]->numel() == 0) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* y = outputs[0]->data<T>();
    const T* dy = output_grads[0]->data<T>();
    T* dx = input_grads[0]->data<T>();
    if (lines.inner == 1) {
      softmax_rows_backward<T><<<cuda::blocks_for(lines.outer * kWarp, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
          y, dy, dx, lines.outer, lines.length);
      cuda::check_launch("softmax_rows_backward", __FILE__, __LINE__);
    } else {
      softmax_lines_backward<T>
          <<<cuda::blocks_for(lines.outer * lines.inner, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
              y, dy, dx, lines.outer, lines.length, lines.inner);
      cuda::check_launch("softmax_lines_backward", __FILE__, __LINE__);
    }
  });
}

}  // namespace plexus::layers

// CUDA kernels of GainUnit (math in gain_unit.h, level interpolation in
// gain_interpolation.h). Deterministic: no floating-point atomics.
#include <algorithm>

#include "convolution/scratch.h"
#include "gain_unit/gain_interpolation.h"
#include "gain_unit/gain_unit.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;
// One block per (n, c) row, grid-stride over rows beyond this.
constexpr long long kMaxRowBlocks = 65535LL * 32;

struct Layout {
  long long batch, channels, spatial;
  __host__ __device__ long long numel() const { return batch * channels * spatial; }
};

Layout layout_of(const Tensor& x) {
  Layout layout{x.dim(0), x.dim(1), 1};
  for (int d = 2; d < x.ndim(); ++d) layout.spatial *= x.dim(d);
  return layout;
}

// y[n, c, j] = x[n, c, j] exp(s[n, c]). One thread per element, grid-stride.
template <typename T>
__global__ void gain_unit_forward(const T* x, const T* level, const T* log_gains, T* y, Layout layout,
                                  long long levels) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < layout.numel();
       e += (long long)gridDim.x * blockDim.x) {
    const long long row = e / layout.spatial;
    const long long n = row / layout.channels, c = row % layout.channels;
    const gain::LevelPair<T> pair = gain::level_pair(level[n], levels);
    y[e] = x[e] * exp(gain::interpolated_log_gain(log_gains, layout.channels, pair, c));
  }
}

// Per row (n, c): dx = dy exp(s) (when wanted) and
//   scaled_sums[n, c] = exp(s[n, c]) sum_j dy[n, c, j] x[n, c, j].
// One block per row, the threads striding over its spatial positions, then a
// block sum in a fixed order.
template <typename T>
__global__ void gain_unit_backward_rows(const T* x, const T* dy, const T* level, const T* log_gains, T* dx,
                                        T* scaled_sums, Layout layout, long long levels) {
  const long long rows = layout.batch * layout.channels;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long n = row / layout.channels, c = row % layout.channels;
    const gain::LevelPair<T> pair = gain::level_pair(level[n], levels);
    const T gain = exp(gain::interpolated_log_gain(log_gains, layout.channels, pair, c));
    const long long base = row * layout.spatial;
    T sum = T(0);
    for (long long j = threadIdx.x; j < layout.spatial; j += blockDim.x) {
      const T gradient = dy[base + j];
      sum += gradient * x[base + j];
      if (dx) dx[base + j] = gradient * gain;
    }
    sum = cuda::block_sum<kThreads>(sum);
    if (threadIdx.x == 0) scaled_sums[row] = gain * sum;
    __syncthreads();  // the next row's block_sum reuses the shared slots
  }
}

// dlog_gains[k, c] += sum over n of w(n, k) scaled_sums[n, c], with
// w = 1-t for k = i, t for k = i+1, else 0. One thread per (k, c), summing n
// in order.
template <typename T>
__global__ void gain_unit_backward_log_gains(const T* scaled_sums, const T* level, T* log_gains_grad, Layout layout,
                                             long long levels) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < levels * layout.channels;
       e += (long long)gridDim.x * blockDim.x) {
    const long long k = e / layout.channels, c = e % layout.channels;
    T total = T(0);
    for (long long n = 0; n < layout.batch; ++n) {
      const gain::LevelPair<T> pair = gain::level_pair(level[n], levels);
      if (pair.lower == k) total += (T(1) - pair.weight) * scaled_sums[n * layout.channels + c];
      else if (pair.lower + 1 == k) total += pair.weight * scaled_sums[n * layout.channels + c];
    }
    log_gains_grad[e] += total;
  }
}

}  // namespace

void GainUnit::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Layout layout = layout_of(*inputs[0]);
  if (layout.numel() == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    gain_unit_forward<T><<<cuda::blocks_for(layout.numel(), kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), parameter("log_gains").value.data<T>(), outputs[0]->data<T>(),
        layout, levels_);
    cuda::check_launch("gain_unit_forward", __FILE__, __LINE__);
  });
}

void GainUnit::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads.size() > 1 && input_grads[1])
    cuda::check_cuda(cudaMemsetAsync(input_grads[1]->raw_data(), 0, input_grads[1]->nbytes(), cuda::stream(ctx)),
                     "cudaMemsetAsync", __FILE__, __LINE__);
  const Tensor& x = *inputs[0];
  const Layout layout = layout_of(x);
  const long long rows = layout.batch * layout.channels;
  if (rows == 0) return;
  Tensor& scaled_sums = scratch_tensor(
      scaled_sums_, {static_cast<std::int64_t>(layout.batch), static_cast<std::int64_t>(layout.channels)}, x.dtype(),
      x.device());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& log_gains = parameter("log_gains");
    const T* level = inputs[1]->data<T>();
    gain_unit_backward_rows<T>
        <<<static_cast<unsigned int>(std::min(rows, kMaxRowBlocks)), kThreads, 0, cuda::stream(ctx)>>>(
            x.data<T>(), output_grads[0]->data<T>(), level, log_gains.value.data<T>(),
            input_grads[0] ? input_grads[0]->data<T>() : nullptr, scaled_sums.data<T>(), layout, levels_);
    cuda::check_launch("gain_unit_backward_rows", __FILE__, __LINE__);
    gain_unit_backward_log_gains<T>
        <<<cuda::blocks_for(levels_ * layout.channels, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
            scaled_sums.data<T>(), level, log_gains.grad.data<T>(), layout, levels_);
    cuda::check_launch("gain_unit_backward_log_gains", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

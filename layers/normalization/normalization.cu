// CUDA kernels of LayerNorm and GroupNorm (math and notation in
// normalization.h). Statistics are two-pass (mean, then the mean squared
// deviation) over values re-read from the caches; every sum is taken in a
// fixed order, with no atomics, so results are deterministic.
//
// LayerNorm: a set is one pixel's C channels, P elements apart in NCHW. A block of 32 x 8 threads takes a tile of 32
// consecutive pixels of one image: threadIdx.x is the pixel (a warp reads 32 neighbours of one channel, coalesced),
// threadIdx.y one of 8 channel slices (c = y, y + 8, ...), whose partial sums meet in shared memory. GroupNorm: a set,
// one (sample, group), is C/G * P contiguous elements; one block of 256 threads per set, block-wide sums. Parameter
// gradients (both): dgamma_c = sum dy xhat and dbeta_c = sum dy over the N * P positions of channel c, which lie in
// rows of P contiguous elements; the backward keeps each set's mean and r in a scratch tensor, a grid of (chunk,
// channel) blocks sums a chunk of positions each into partials, and a last kernel adds the chunks in order to the
// gradients.
#include <algorithm>

#include "convolution/scratch.h"
#include "normalization/normalization.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kPixelLanes = 32;
constexpr int kChannelSlices = 8;
constexpr int kThreads = 256;
constexpr long long kMaxBlocks = 65535LL * 32;
// Parameter gradients: a chunk holds at least this many positions, and there
// are enough chunks for about this many blocks in all.
constexpr long long kMinChunkPositions = 4096;
constexpr long long kTargetGradientBlocks = 1024;

struct Geometry {
  long long images, channels, pixels;
};

Geometry geometry_of(const Tensor& x) {
  Geometry g{x.dim(0), x.dim(1), 1};
  for (int d = 2; d < x.ndim(); ++d) g.pixels *= x.dim(d);
  return g;
}

unsigned int grid_for(long long blocks) {
  return static_cast<unsigned int>(std::max(1LL, std::min(blocks, kMaxBlocks)));
}

// i split as (i / extent, i % extent) while i advances by kThreads: two
// additions per step, where a 64-bit division per element would cost more
// than the element's load.
struct StridedSplit {
  long long major, minor, extent, major_step, minor_step;
  __device__ StridedSplit(long long i, long long extent)
      : major(i / extent),
        minor(i % extent),
        extent(extent),
        major_step(kThreads / extent),
        minor_step(kThreads % extent) {}
  __device__ void advance() {
    major += major_step;
    minor += minor_step;
    if (minor >= extent) {
      minor -= extent;
      ++major;
    }
  }
};

template <typename T>
__device__ __forceinline__ T gamma_at(const T* gamma, long long c) {
  return gamma ? gamma[c] : T(1);
}

template <typename T>
__device__ __forceinline__ T beta_at(const T* beta, long long c) {
  return beta ? beta[c] : T(0);
}

// ---- LayerNorm ----

// The sum over the 8 channel slices of each pixel lane's `value`, in slice
// order, returned to every thread of the lane. Every thread of the block calls it.
template <typename T>
__device__ T slice_sum(T (&scratch)[kChannelSlices][kPixelLanes], T value) {
  scratch[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  T total = T(0);
#pragma unroll
  for (int s = 0; s < kChannelSlices; ++s) total += scratch[s][threadIdx.x];
  __syncthreads();
  return total;
}

// mu and r = 1 / sqrt(var + eps) of the pixel whose channel 0 is at x
// (channel stride P); `valid` false for lanes past the image's last pixel,
// which take part in the sums with nothing.
template <typename T>
__device__ void pixel_statistics(const T* x, bool valid, Geometry g, T eps, T (&scratch)[kChannelSlices][kPixelLanes],
                                 T& mean, T& rstd) {
  T sum = T(0);
  if (valid)
    for (long long c = threadIdx.y; c < g.channels; c += kChannelSlices) sum += x[c * g.pixels];
  mean = slice_sum(scratch, sum) / T(g.channels);
  T squares = T(0);
  if (valid)
    for (long long c = threadIdx.y; c < g.channels; c += kChannelSlices) {
      const T d = x[c * g.pixels] - mean;
      squares += d * d;
    }
  rstd = T(1) / sqrt(slice_sum(scratch, squares) / T(g.channels) + eps);
}

// y = (x - mu) r gamma_c + beta_c per pixel. Launch: blocks of 32 x 8
// threads grid-striding over the 32-pixel tiles of every image.
template <typename T>
__global__ void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* y, Geometry g, T eps) {
  __shared__ T scratch[kChannelSlices][kPixelLanes];
  const long long tiles_per_image = (g.pixels + kPixelLanes - 1) / kPixelLanes;
  for (long long tile = blockIdx.x; tile < g.images * tiles_per_image; tile += gridDim.x) {
    const long long p = tile % tiles_per_image * kPixelLanes + threadIdx.x;
    const bool valid = p < g.pixels;
    const long long offset = tile / tiles_per_image * g.channels * g.pixels + p;
    T mean, rstd;
    pixel_statistics(x + offset, valid, g, eps, scratch, mean, rstd);
    if (!valid) continue;
    for (long long c = threadIdx.y; c < g.channels; c += kChannelSlices) {
      const long long e = offset + c * g.pixels;
      y[e] = (x[e] - mean) * rstd * gamma_at(gamma, c) + beta_at(beta, c);
    }
  }
}

// Per pixel: mu and r into statistics ([2, N * P]: means, then r), and,
// when dx is wanted, dx = r (g - mean_c g - xhat mean_c(g xhat)), g = dy gamma_c.
// Launch as layer_norm_forward.
template <typename T>
__global__ void layer_norm_backward_pixels(const T* x, const T* dy, const T* gamma, T* dx, T* statistics, Geometry g,
                                           T eps) {
  __shared__ T scratch[kChannelSlices][kPixelLanes];
  const long long tiles_per_image = (g.pixels + kPixelLanes - 1) / kPixelLanes;
  const long long positions = g.images * g.pixels;
  for (long long tile = blockIdx.x; tile < g.images * tiles_per_image; tile += gridDim.x) {
    const long long n = tile / tiles_per_image;
    const long long p = tile % tiles_per_image * kPixelLanes + threadIdx.x;
    const bool valid = p < g.pixels;
    const long long offset = n * g.channels * g.pixels + p;
    T mean, rstd;
    pixel_statistics(x + offset, valid, g, eps, scratch, mean, rstd);
    if (valid && threadIdx.y == 0) {
      statistics[n * g.pixels + p] = mean;
      statistics[positions + n * g.pixels + p] = rstd;
    }
    if (!dx) continue;  // the same for every thread
    T sum_g = T(0), sum_g_xhat = T(0);
    if (valid)
      for (long long c = threadIdx.y; c < g.channels; c += kChannelSlices) {
        const long long e = offset + c * g.pixels;
        const T gradient = dy[e] * gamma_at(gamma, c);
        sum_g += gradient;
        sum_g_xhat += gradient * (x[e] - mean) * rstd;
      }
    const T mean_g = slice_sum(scratch, sum_g) / T(g.channels);
    const T mean_g_xhat = slice_sum(scratch, sum_g_xhat) / T(g.channels);
    if (!valid) continue;
    for (long long c = threadIdx.y; c < g.channels; c += kChannelSlices) {
      const long long e = offset + c * g.pixels;
      const T xhat = (x[e] - mean) * rstd;
      dx[e] = rstd * (dy[e] * gamma_at(gamma, c) - mean_g - xhat * mean_g_xhat);
    }
  }
}

// ---- GroupNorm ----

// The sum of `value` over the block's 256 threads, returned to every thread;
// `slot` is one shared element. Every thread of the block calls it.
template <typename T>
__device__ T block_total(T value, T* slot) {
  value = cuda::block_sum<kThreads>(value);
  if (threadIdx.x == 0) *slot = value;
  __syncthreads();
  value = *slot;
  __syncthreads();  // the slot and block_sum's shared memory are free again
  return value;
}

// mu and r = 1 / sqrt(var + eps) of `size` contiguous elements.
template <typename T>
__device__ void group_statistics(const T* x, long long size, T eps, T* slot, T& mean, T& rstd) {
  T sum = T(0);
  for (long long k = threadIdx.x; k < size; k += kThreads) sum += x[k];
  mean = block_total(sum, slot) / T(size);
  T squares = T(0);
  for (long long k = threadIdx.x; k < size; k += kThreads) {
    const T d = x[k] - mean;
    squares += d * d;
  }
  rstd = T(1) / sqrt(block_total(squares, slot) / T(size) + eps);
}

// A GroupNorm set (sample n, group g): row n * G + g of C/G * P elements.
struct GroupLayout {
  long long rows, groups, group_channels, pixels;
  __host__ __device__ long long size() const { return group_channels * pixels; }
};

// y = (x - mu) r gamma_c + beta_c. Launch: blocks of 256 threads
// grid-striding over the N * G rows.
template <typename T>
__global__ void group_norm_forward(const T* x, const T* gamma, const T* beta, T* y, GroupLayout layout, T eps) {
  __shared__ T slot;
  const long long size = layout.size();
  for (long long row = blockIdx.x; row < layout.rows; row += gridDim.x) {
    const T* x_row = x + row * size;
    T mean, rstd;
    group_statistics(x_row, size, eps, &slot, mean, rstd);
    const long long first_channel = row % layout.groups * layout.group_channels;
    T* y_row = y + row * size;
    StridedSplit at(threadIdx.x, layout.pixels);  // at.major: the channel in the group
    for (long long k = threadIdx.x; k < size; k += kThreads, at.advance()) {
      const long long c = first_channel + at.major;
      y_row[k] = (x_row[k] - mean) * rstd * gamma_at(gamma, c) + beta_at(beta, c);
    }
  }
}

// Per row: mu and r into statistics ([2, N * G]: means, then r), and, when dx
// is wanted, dx = r (g - mean g - xhat mean(g xhat)), g = dy gamma_c.
// Launch as group_norm_forward.
template <typename T>
__global__ void group_norm_backward_rows(const T* x, const T* dy, const T* gamma, T* dx, T* statistics,
                                         GroupLayout layout, T eps) {
  __shared__ T slot;
  const long long size = layout.size();
  for (long long row = blockIdx.x; row < layout.rows; row += gridDim.x) {
    const T* x_row = x + row * size;
    T mean, rstd;
    group_statistics(x_row, size, eps, &slot, mean, rstd);
    if (threadIdx.x == 0) {
      statistics[row] = mean;
      statistics[layout.rows + row] = rstd;
    }
    if (!dx) continue;  // the same for every thread
    const long long first_channel = row % layout.groups * layout.group_channels;
    const T* dy_row = dy + row * size;
    T sum_g = T(0), sum_g_xhat = T(0);
    StridedSplit at(threadIdx.x, layout.pixels);
    for (long long k = threadIdx.x; k < size; k += kThreads, at.advance()) {
      const T gradient = dy_row[k] * gamma_at(gamma, first_channel + at.major);
      sum_g += gradient;
      sum_g_xhat += gradient * (x_row[k] - mean) * rstd;
    }
    const T mean_g = block_total(sum_g, &slot) / T(size);
    const T mean_g_xhat = block_total(sum_g_xhat, &slot) / T(size);
    T* dx_row = dx + row * size;
    at = StridedSplit(threadIdx.x, layout.pixels);
    for (long long k = threadIdx.x; k < size; k += kThreads, at.advance()) {
      const T xhat = (x_row[k] - mean) * rstd;
      dx_row[k] = rstd * (dy_row[k] * gamma_at(gamma, first_channel + at.major) - mean_g - xhat * mean_g_xhat);
    }
  }
}

// ---- Parameter gradients (both layers) ----

// Block b = (chunk k, channel c), k = b / C, c = b % C, sums over positions
// i = n * P + p in chunk k (`chunk_size` of the N * P):
//   partials[0, k, c] = sum dy xhat,  partials[1, k, c] = sum dy,
// where xhat = (x - mu_s) r_s with s = i for LayerNorm (group_channels 0),
// s = n * G + c / (C/G) for GroupNorm; statistics [2, sets]. Launch: 256
// threads, blocks grid-striding over chunks x C.
template <typename T>
__global__ void affine_gradient_partials(const T* x, const T* dy, const T* statistics, long long sets,
                                         long long group_channels, Geometry g, long long chunks, long long chunk_size,
                                         T* partials) {
  const long long positions = g.images * g.pixels;
  for (long long b = blockIdx.x; b < chunks * g.channels; b += gridDim.x) {
    const long long k = b / g.channels, c = b % g.channels;
    const long long end = (k + 1) * chunk_size < positions ? (k + 1) * chunk_size : positions;
    T sum_dy_xhat = T(0), sum_dy = T(0);
    StridedSplit at(k * chunk_size + threadIdx.x, g.pixels);  // (n, p)
    for (long long i = k * chunk_size + threadIdx.x; i < end; i += kThreads, at.advance()) {
      const long long n = at.major;
      const long long e = (n * g.channels + c) * g.pixels + at.minor;
      const long long s = group_channels ? n * (g.channels / group_channels) + c / group_channels : i;
      const T gradient = dy[e];
      sum_dy_xhat += gradient * (x[e] - statistics[s]) * statistics[sets + s];
      sum_dy += gradient;
    }
    sum_dy_xhat = cuda::block_sum<kThreads>(sum_dy_xhat);
    __syncthreads();  // the two block sums share their slots
    sum_dy = cuda::block_sum<kThreads>(sum_dy);
    if (threadIdx.x == 0) {
      partials[k * g.channels + c] = sum_dy_xhat;
      partials[(chunks + k) * g.channels + c] = sum_dy;
    }
    __syncthreads();  // the next block's sums reuse the slots
  }
}

// gamma_grad[c] += sum_k partials[0, k, c], beta_grad[c] += sum_k partials[1, k, c],
// the chunks added in order. One thread per channel, grid-stride.
template <typename T>
__global__ void affine_gradient_finish(const T* partials, long long chunks, long long channels, T* gamma_grad,
                                       T* beta_grad) {
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < channels;
       c += (long long)gridDim.x * blockDim.x) {
    T gamma_sum = T(0), beta_sum = T(0);
    for (long long k = 0; k < chunks; ++k) {
      gamma_sum += partials[k * channels + c];
      beta_sum += partials[(chunks + k) * channels + c];
    }
    gamma_grad[c] += gamma_sum;
    beta_grad[c] += beta_sum;
  }
}

// Adds dgamma and dbeta of x, dy to the parameters' gradients, from the
// per-set statistics the backward's first kernel wrote.
template <typename T>
void accumulate_affine_gradients(Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& statistics,
                                 long long group_channels, Tensor& partials_cache, Parameter& gamma, Parameter& beta) {
  const Geometry g = geometry_of(x);
  const long long positions = g.images * g.pixels;
  const long long chunks = std::max(1LL, std::min((kTargetGradientBlocks + g.channels - 1) / g.channels,
                                                  (positions + kMinChunkPositions - 1) / kMinChunkPositions));
  const long long chunk_size = (positions + chunks - 1) / chunks;
  Tensor& partials = scratch_tensor(partials_cache, {2, chunks, g.channels}, x.dtype(), x.device());
  const cudaStream_t stream = cuda::stream(ctx);
  affine_gradient_partials<T><<<grid_for(chunks * g.channels), kThreads, 0, stream>>>(
      x.data<T>(), dy.data<T>(), statistics.data<T>(), statistics.dim(1), group_channels, g, chunks, chunk_size,
      partials.data<T>());
  cuda::check_launch("affine_gradient_partials", __FILE__, __LINE__);
  affine_gradient_finish<T><<<cuda::blocks_for(g.channels, kThreads), kThreads, 0, stream>>>(
      partials.data<T>(), chunks, g.channels, gamma.grad.data<T>(), beta.grad.data<T>());
  cuda::check_launch("affine_gradient_finish", __FILE__, __LINE__);
}

}  // namespace

void LayerNorm::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  if (x.numel() == 0) return;
  const Geometry g = geometry_of(x);
  const long long tiles = g.images * ((g.pixels + kPixelLanes - 1) / kPixelLanes);
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    layer_norm_forward<T><<<grid_for(tiles), dim3(kPixelLanes, kChannelSlices), 0, cuda::stream(ctx)>>>(
        x.data<T>(), values_or_null<T>(affine_parameter("gamma")), values_or_null<T>(affine_parameter("beta")),
        outputs[0]->data<T>(), g, static_cast<T>(eps()));
    cuda::check_launch("layer_norm_forward", __FILE__, __LINE__);
  });
}

void LayerNorm::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                              const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  Parameter* gamma = affine_parameter("gamma");
  Tensor* dx = input_grads[0];
  if (x.numel() == 0 || (!dx && !gamma)) return;
  const Geometry g = geometry_of(x);
  const long long tiles = g.images * ((g.pixels + kPixelLanes - 1) / kPixelLanes);
  Tensor& statistics = scratch_tensor(statistics_, {2, g.images * g.pixels}, x.dtype(), x.device());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    layer_norm_backward_pixels<T><<<grid_for(tiles), dim3(kPixelLanes, kChannelSlices), 0, cuda::stream(ctx)>>>(
        x.data<T>(), output_grads[0]->data<T>(), values_or_null<T>(gamma), dx ? dx->data<T>() : nullptr,
        statistics.data<T>(), g, static_cast<T>(eps()));
    cuda::check_launch("layer_norm_backward_pixels", __FILE__, __LINE__);
    if (gamma)
      accumulate_affine_gradients<T>(ctx, x, *output_grads[0], statistics, 0, partials_, *gamma,
                                     *affine_parameter("beta"));
  });
}

void GroupNorm::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  if (x.numel() == 0) return;
  const Geometry g = geometry_of(x);
  const GroupLayout layout{g.images * groups_, groups_, g.channels / groups_, g.pixels};
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    group_norm_forward<T><<<grid_for(layout.rows), kThreads, 0, cuda::stream(ctx)>>>(
        x.data<T>(), values_or_null<T>(affine_parameter("gamma")), values_or_null<T>(affine_parameter("beta")),
        outputs[0]->data<T>(), layout, static_cast<T>(eps()));
    cuda::check_launch("group_norm_forward", __FILE__, __LINE__);
  });
}

void GroupNorm::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                              const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  Parameter* gamma = affine_parameter("gamma");
  Tensor* dx = input_grads[0];
  if (x.numel() == 0 || (!dx && !gamma)) return;
  const Geometry g = geometry_of(x);
  const GroupLayout layout{g.images * groups_, groups_, g.channels / groups_, g.pixels};
  Tensor& statistics = scratch_tensor(statistics_, {2, layout.rows}, x.dtype(), x.device());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    group_norm_backward_rows<T><<<grid_for(layout.rows), kThreads, 0, cuda::stream(ctx)>>>(
        x.data<T>(), output_grads[0]->data<T>(), values_or_null<T>(gamma), dx ? dx->data<T>() : nullptr,
        statistics.data<T>(), layout, static_cast<T>(eps()));
    cuda::check_launch("group_norm_backward_rows", __FILE__, __LINE__);
    if (gamma)
      accumulate_affine_gradients<T>(ctx, x, *output_grads[0], statistics, layout.group_channels, partials_, *gamma,
                                     *affine_parameter("beta"));
  });
}

}  // namespace plexus::layers

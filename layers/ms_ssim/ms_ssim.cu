// CUDA kernels of MSSSIM (math in ms_ssim.h). Per scale: the pyramid by
// 2x2 pooling, the five Gaussian-filtered maps in two separable passes
// (rows, then columns), per-plane means by block partial sums summed in a
// fixed order (deterministic, no atomics). Backward recomputes them, then
// goes from the coarsest scale to the finest: the maps' gradients, the
// transposed filter (columns, then rows, as gathers), and the coarser
// scale's gradient spread back through the pooling.
#include <algorithm>
#include <cmath>

#include "convolution/scratch.h"
#include "ms_ssim/ms_ssim.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;
constexpr int kQuantities = 5;  // mu_x, mu_y, E[xx], E[yy], E[xy]
// Enough partial-sum blocks to fill the GPU, whatever the batch.
constexpr long long kMaxReductionBlocks = 1024;

template <typename T>
struct Constants {
  T window[kMsSsimWindow];
  T weights[kMsSsimScales];
};

template <typename T>
Constants<T> constants() {
  Constants<T> c{};
  const auto g = ms_ssim_window();
  for (int k = 0; k < kMsSsimWindow; ++k) c.window[k] = static_cast<T>(g[k]);
  for (int s = 0; s < kMsSsimScales; ++s) c.weights[s] = static_cast<T>(kMsSsimWeights[s]);
  return c;
}

// out [planes, (h+1)/2, (w+1)/2]: out(i, j) = (1/4) sum of in over rows 2i - h%2 + {0, 1}
// and columns 2j - w%2 + {0, 1}, rows and columns outside the plane counting 0.
template <typename T>
__global__ void ms_ssim_pool(const T* in, long long planes, long long h, long long w, T* out) {
  const long long oh = (h + 1) / 2, ow = (w + 1) / 2, ph = h % 2, pw = w % 2;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < planes * oh * ow;
       index += (long long)gridDim.x * blockDim.x) {
    const long long j = index % ow, i = (index / ow) % oh, p = index / (ow * oh);
    T sum = T(0);
    for (long long r = 2 * i - ph; r < 2 * i - ph + 2; ++r)
      for (long long c = 2 * j - pw; c < 2 * j - pw + 2; ++c)
        if (r >= 0 && r < h && c >= 0 && c < w) sum += in[(p * h + r) * w + c];
    out[index] = sum * T(0.25);
  }
}

// rows[q] [planes, h, w - 10] = sum_k g_k v_q(r, j + k), v = (x, y, x x, y y, x y).
template <typename T>
__global__ void ms_ssim_filter_rows(const T* x, const T* y, long long planes, long long h, long long w, Constants<T> c,
                                    T* rows) {
  const long long ow = w - (kMsSsimWindow - 1), n = planes * h * ow;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < n;
       index += (long long)gridDim.x * blockDim.x) {
    const long long j = index % ow, pr = index / ow;  // pr = p * h + r
    const T* xr = x + pr * w + j;
    const T* yr = y + pr * w + j;
    T sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    for (int k = 0; k < kMsSsimWindow; ++k) {
      const T a = xr[k], b = yr[k], g = c.window[k];
      sx += g * a;
      sy += g * b;
      sxx += g * a * a;
      syy += g * b * b;
      sxy += g * a * b;
    }
    rows[index] = sx;
    rows[n + index] = sy;
    rows[2 * n + index] = sxx;
    rows[3 * n + index] = syy;
    rows[4 * n + index] = sxy;
  }
}

// maps[q] [planes, h - 10, ow] = sum_k g_k rows_q(i + k, j).
template <typename T>
__global__ void ms_ssim_filter_columns(const T* rows, long long planes, long long h, long long ow, Constants<T> c,
                                       T* maps) {
  const long long oh = h - (kMsSsimWindow - 1), n = planes * oh * ow, rows_n = planes * h * ow;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < n;
       index += (long long)gridDim.x * blockDim.x) {
    const long long j = index % ow, i = (index / ow) % oh, p = index / (ow * oh);
    for (int q = 0; q < kQuantities; ++q) {
      const T* column = rows + q * rows_n + (p * h + i) * ow + j;
      T sum = 0;
      for (int k = 0; k < kMsSsimWindow; ++k) sum += c.window[k] * column[k * ow];
      maps[q * n + index] = sum;
    }
  }
}

// cs and l at a position, from the five maps.
template <typename T>
struct Similarity {
  T cs, luminance, cs_denominator, luminance_denominator;
};

template <typename T>
__device__ Similarity<T> similarity_at(const T* maps, long long n, long long index) {
  const T a = maps[index], b = maps[n + index];
  const T d = maps[2 * n + index] - a * a + maps[3 * n + index] - b * b + T(kMsSsimC2);
  const T q = a * a + b * b + T(kMsSsimC1);
  return {(T(2) * (maps[4 * n + index] - a * b) + T(kMsSsimC2)) / d, (T(2) * a * b + T(kMsSsimC1)) / q, d, q};
}

// partials[p, part]: the sum over part `part` of plane p's positions of cs (l cs at the last scale).
template <typename T>
__global__ void ms_ssim_partial_sums(const T* maps, long long planes, long long positions, int parts, bool last,
                                     T* partials) {
  const long long p = blockIdx.x / parts, n = planes * positions;
  const int part = blockIdx.x % parts;
  T sum = 0;
  for (long long i = part * (long long)blockDim.x + threadIdx.x; i < positions; i += (long long)parts * blockDim.x) {
    const Similarity<T> v = similarity_at(maps, n, p * positions + i);
    sum += last ? v.cs * v.luminance : v.cs;
  }
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// factors[p, scale] = (the partials of plane p summed in order) / positions.
template <typename T>
__global__ void ms_ssim_factors(const T* partials, long long planes, int parts, long long positions, int scale,
                                T* factors) {
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < planes;
       p += (long long)gridDim.x * blockDim.x) {
    T sum = 0;
    for (int part = 0; part < parts; ++part) sum += partials[p * parts + part];
    factors[p * kMsSsimScales + scale] = sum / static_cast<T>(positions);
  }
}

// M of plane p: prod_s relu(factor_s)^w_s.
template <typename T>
__device__ T plane_value(const T* factors, long long p, const Constants<T>& c) {
  T value = 1;
  for (int s = 0; s < kMsSsimScales; ++s) {
    const T f = factors[p * kMsSsimScales + s];
    value *= f > T(0) ? pow(f, c.weights[s]) : T(0);
  }
  return value;
}

// out = mean over planes of M; one block.
template <typename T>
__global__ void ms_ssim_mean(const T* factors, long long planes, Constants<T> c, T* out) {
  T sum = 0;
  for (long long p = threadIdx.x; p < planes; p += blockDim.x) sum += plane_value(factors, p, c);
  sum = cuda::block_sum<kThreads>(sum);
  if (threadIdx.x == 0) out[0] = sum / static_cast<T>(planes);
}

// The maps' gradients at one scale, written over the maps: with
// g = dy / planes * w_s M / factor_s / positions (0 where M or the factor is 0),
//   gcs = g (g l at the last scale), gl = g cs at the last scale,
//   d/dmu_x = gcs (2 mu_x cs - 2 mu_y) / D + gl (2 mu_y - 2 mu_x l) / Q, and mu_y alike,
//   d/dE[xx] = d/dE[yy] = -gcs cs / D, d/dE[xy] = 2 gcs / D.
template <typename T>
__global__ void ms_ssim_map_gradients(T* maps, const T* factors, const T* dy, long long planes, long long positions,
                                      int scale, Constants<T> c) {
  const long long n = planes * positions;
  const bool last = scale + 1 == kMsSsimScales;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < n;
       index += (long long)gridDim.x * blockDim.x) {
    const long long p = index / positions;
    const T value = plane_value(factors, p, c), factor = factors[p * kMsSsimScales + scale];
    const T g = value > T(0) && factor > T(0)
                    ? dy[0] / static_cast<T>(planes) * c.weights[scale] * value / factor / static_cast<T>(positions)
                    : T(0);
    const T a = maps[index], b = maps[n + index];
    const Similarity<T> v = similarity_at(maps, n, index);
    const T gcs = last ? g * v.luminance : g, gl = last ? g * v.cs : T(0);
    maps[index] = gcs * (T(2) * a * v.cs - T(2) * b) / v.cs_denominator +
                  gl * (T(2) * b - T(2) * a * v.luminance) / v.luminance_denominator;
    maps[n + index] = gcs * (T(2) * b * v.cs - T(2) * a) / v.cs_denominator +
                      gl * (T(2) * a - T(2) * b * v.luminance) / v.luminance_denominator;
    maps[2 * n + index] = -gcs * v.cs / v.cs_denominator;
    maps[3 * n + index] = maps[2 * n + index];
    maps[4 * n + index] = T(2) * gcs / v.cs_denominator;
  }
}

// The columns pass transposed: rows_q(r, j) = sum_k g_k grads_q(r - k, j), 0 <= r - k < h - 10.
template <typename T>
__global__ void ms_ssim_columns_transposed(const T* grads, long long planes, long long h, long long ow, Constants<T> c,
                                           T* rows) {
  const long long oh = h - (kMsSsimWindow - 1), n = planes * oh * ow, rows_n = planes * h * ow;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < rows_n;
       index += (long long)gridDim.x * blockDim.x) {
    const long long j = index % ow, r = (index / ow) % h, p = index / (ow * h);
    for (int q = 0; q < kQuantities; ++q) {
      T sum = 0;
      for (int k = 0; k < kMsSsimWindow; ++k) {
        const long long i = r - k;
        if (i >= 0 && i < oh) sum += c.window[k] * grads[q * n + (p * oh + i) * ow + j];
      }
      rows[q * rows_n + index] = sum;
    }
  }
}

// The rows pass transposed, then the gradients of x and y at this scale:
//   full_q(r, col) = sum_k g_k rows_q(r, col - k), 0 <= col - k < w - 10
//   dx = full_mu_x + 2 x full_E[xx] + y full_E[xy] + coarse_dx((r + h%2) / 2, (col + w%2) / 2) / 4
//   dy = full_mu_y + 2 y full_E[yy] + x full_E[xy] + coarse_dy(...) / 4
// (coarse null at the coarsest scale).
template <typename T>
__global__ void ms_ssim_rows_transposed(const T* rows, const T* x, const T* y, long long planes, long long h,
                                        long long w, Constants<T> c, const T* coarse_dx, const T* coarse_dy, T* dx,
                                        T* dy) {
  const long long ow = w - (kMsSsimWindow - 1), rows_n = planes * h * ow;
  const long long ch = (h + 1) / 2, cw = (w + 1) / 2;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < planes * h * w;
       index += (long long)gridDim.x * blockDim.x) {
    const long long col = index % w, pr = index / w, r = pr % h, p = pr / h;
    T full[kQuantities];
    for (int q = 0; q < kQuantities; ++q) {
      T sum = 0;
      for (int k = 0; k < kMsSsimWindow; ++k) {
        const long long j = col - k;
        if (j >= 0 && j < ow) sum += c.window[k] * rows[q * rows_n + pr * ow + j];
      }
      full[q] = sum;
    }
    T gx = full[0] + T(2) * x[index] * full[2] + y[index] * full[4];
    T gy = full[1] + T(2) * y[index] * full[3] + x[index] * full[4];
    if (coarse_dx) {
      const long long coarse = (p * ch + (r + h % 2) / 2) * cw + (col + w % 2) / 2;
      gx += coarse_dx[coarse] * T(0.25);
      gy += coarse_dy[coarse] * T(0.25);
    }
    dx[index] = gx;
    dy[index] = gy;
  }
}

// Where each buffer lies in the layer's one scratch tensor (in elements).
struct Layout {
  long long planes = 0, parts = 0;
  std::array<std::int64_t, kMsSsimScales> heights{}, widths{};
  std::array<long long, kMsSsimScales> x{}, y{}, dx{}, dy{};  // scale 0's x and y are the inputs
  long long rows = 0, maps = 0, partials = 0, factors = 0, total = 0;

  explicit Layout(const Shape& shape) {
    planes = shape[0] * shape[1];
    heights = ms_ssim_sides(shape[2]);
    widths = ms_ssim_sides(shape[3]);
    long long at = 0;
    for (int s = 0; s < kMsSsimScales; ++s) {
      const long long size = planes * heights[s] * widths[s];
      if (s > 0) {
        x[s] = at;
        y[s] = at + size;
        at += 2 * size;
      }
      dx[s] = at;
      dy[s] = at + size;
      at += 2 * size;
    }
    const long long ow = widths[0] - (kMsSsimWindow - 1), oh = heights[0] - (kMsSsimWindow - 1);
    rows = at;
    at += kQuantities * planes * heights[0] * ow;
    maps = at;
    at += kQuantities * planes * oh * ow;
    parts = std::max(1LL, std::min((oh * ow + kThreads - 1) / kThreads, kMaxReductionBlocks / planes));
    partials = at;
    at += planes * parts;
    factors = at;
    at += planes * kMsSsimScales;
    total = at;
  }
  long long positions(int s) const { return (heights[s] - (kMsSsimWindow - 1)) * (widths[s] - (kMsSsimWindow - 1)); }
};

// The pyramids (scales 1..4) and the five maps of each scale, as far as the
// factors: factors[p, s] = CS_s (s < 4), S_4.
template <typename T>
void compute_factors(Context& ctx, const Layout& l, const T* x, const T* y, T* base, const Constants<T>& c) {
  cudaStream_t stream = cuda::stream(ctx);
  const T* xs = x;
  const T* ys = y;
  for (int s = 0; s < kMsSsimScales; ++s) {
    const long long h = l.heights[s], w = l.widths[s], ow = w - (kMsSsimWindow - 1);
    if (s > 0) {
      const long long h0 = l.heights[s - 1], w0 = l.widths[s - 1];
      const unsigned int blocks = cuda::blocks_for(l.planes * h * w, kThreads);
      ms_ssim_pool<T><<<blocks, kThreads, 0, stream>>>(xs, l.planes, h0, w0, base + l.x[s]);
      cuda::check_launch("ms_ssim_pool", __FILE__, __LINE__);
      ms_ssim_pool<T><<<blocks, kThreads, 0, stream>>>(ys, l.planes, h0, w0, base + l.y[s]);
      cuda::check_launch("ms_ssim_pool", __FILE__, __LINE__);
      xs = base + l.x[s];
      ys = base + l.y[s];
    }
    ms_ssim_filter_rows<T><<<cuda::blocks_for(l.planes * h * ow, kThreads), kThreads, 0, stream>>>(xs, ys, l.planes, h,
                                                                                                   w, c, base + l.rows);
    cuda::check_launch("ms_ssim_filter_rows", __FILE__, __LINE__);
    const long long positions = l.positions(s);
    ms_ssim_filter_columns<T><<<cuda::blocks_for(l.planes * positions, kThreads), kThreads, 0, stream>>>(
        base + l.rows, l.planes, h, ow, c, base + l.maps);
    cuda::check_launch("ms_ssim_filter_columns", __FILE__, __LINE__);
    const int parts = static_cast<int>(std::min<long long>(l.parts, (positions + kThreads - 1) / kThreads));
    ms_ssim_partial_sums<T><<<static_cast<unsigned int>(l.planes * parts), kThreads, 0, stream>>>(
        base + l.maps, l.planes, positions, parts, s + 1 == kMsSsimScales, base + l.partials);
    cuda::check_launch("ms_ssim_partial_sums", __FILE__, __LINE__);
    ms_ssim_factors<T><<<cuda::blocks_for(l.planes, kThreads), kThreads, 0, stream>>>(
        base + l.partials, l.planes, parts, positions, s, base + l.factors);
    cuda::check_launch("ms_ssim_factors", __FILE__, __LINE__);
  }
}

}  // namespace

void MSSSIM::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Layout l(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Constants<T> c = constants<T>();
    T* base = scratch_tensor(scratch_, {l.total}, inputs[0]->dtype(), ctx.device()).template data<T>();
    compute_factors<T>(ctx, l, inputs[0]->data<T>(), inputs[1]->data<T>(), base, c);
    ms_ssim_mean<T><<<1, kThreads, 0, cuda::stream(ctx)>>>(base + l.factors, l.planes, c, outputs[0]->data<T>());
    cuda::check_launch("ms_ssim_mean", __FILE__, __LINE__);
  });
}

void MSSSIM::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0] && !input_grads[1]) return;
  const Layout l(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Constants<T> c = constants<T>();
    cudaStream_t stream = cuda::stream(ctx);
    T* base = scratch_tensor(scratch_, {l.total}, inputs[0]->dtype(), ctx.device()).template data<T>();
    const T* x0 = inputs[0]->data<T>();
    const T* y0 = inputs[1]->data<T>();
    compute_factors<T>(ctx, l, x0, y0, base, c);
    for (int s = kMsSsimScales - 1; s >= 0; --s) {
      const long long h = l.heights[s], w = l.widths[s], ow = w - (kMsSsimWindow - 1);
      const T* xs = s == 0 ? x0 : base + l.x[s];
      const T* ys = s == 0 ? y0 : base + l.y[s];
      ms_ssim_filter_rows<T><<<cuda::blocks_for(l.planes * h * ow, kThreads), kThreads, 0, stream>>>(
          xs, ys, l.planes, h, w, c, base + l.rows);
      cuda::check_launch("ms_ssim_filter_rows", __FILE__, __LINE__);
      const long long positions = l.positions(s);
      const unsigned int map_blocks = cuda::blocks_for(l.planes * positions, kThreads);
      ms_ssim_filter_columns<T><<<map_blocks, kThreads, 0, stream>>>(base + l.rows, l.planes, h, ow, c, base + l.maps);
      cuda::check_launch("ms_ssim_filter_columns", __FILE__, __LINE__);
      ms_ssim_map_gradients<T><<<map_blocks, kThreads, 0, stream>>>(
          base + l.maps, base + l.factors, output_grads[0]->data<T>(), l.planes, positions, s, c);
      cuda::check_launch("ms_ssim_map_gradients", __FILE__, __LINE__);
      ms_ssim_columns_transposed<T><<<cuda::blocks_for(l.planes * h * ow, kThreads), kThreads, 0, stream>>>(
          base + l.maps, l.planes, h, ow, c, base + l.rows);
      cuda::check_launch("ms_ssim_columns_transposed", __FILE__, __LINE__);
      // Scale 0 writes the input gradients (a scratch slot for one not wanted).
      T* dx = s == 0 && input_grads[0] ? input_grads[0]->data<T>() : base + l.dx[s];
      T* dy = s == 0 && input_grads[1] ? input_grads[1]->data<T>() : base + l.dy[s];
      const bool coarsest = s + 1 == kMsSsimScales;
      ms_ssim_rows_transposed<T><<<cuda::blocks_for(l.planes * h * w, kThreads), kThreads, 0, stream>>>(
          base + l.rows, xs, ys, l.planes, h, w, c, coarsest ? nullptr : base + l.dx[s + 1],
          coarsest ? nullptr : base + l.dy[s + 1], dx, dy);
      cuda::check_launch("ms_ssim_rows_transposed", __FILE__, __LINE__);
    }
  });
}

}  // namespace plexus::layers

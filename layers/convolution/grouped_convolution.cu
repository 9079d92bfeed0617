// CUDA passes of Convolution for groups or dilation other than 1
// (convolution.h), on f32 stand-ins of bf16 activations
// (activation_storage.h): im2col / col2im with dilated taps plus cuBLAS
// products per group, batched over images or groups; when Ci/G = 1
// (depthwise), direct kernels without columns. The tensor-core engine takes
// none of these passes. Every step runs on the context's stream.
#include <algorithm>
#include <optional>

#include "activation_storage.h"
#include "convolution/channel_ops.h"
#include "convolution/convolution.h"
#include "convolution/scratch.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;  // a multiple of the warp size (block_sum relies on it)

// The same per-context column scratch as convolution.cu's passes.
ColumnScratch& column_scratch(Context& ctx) { return ctx.shared_state<ColumnScratch>("convolution.column_scratch"); }

// The geometry as kernel arguments.
struct DeviceGeometry {
  long long channels, height, width;  // of X
  int kernel, stride, padding, dilation;
  long long patches_high, patches_wide;
};

DeviceGeometry device_geometry(const ConvGeometry& g) {
  return {g.channels,
          g.height,
          g.width,
          static_cast<int>(g.kernel),
          static_cast<int>(g.stride),
          static_cast<int>(g.padding),
          static_cast<int>(g.dilation),
          g.patches_high,
          g.patches_wide};
}

// columns[n, (c*k + i)*k + j, a*Pw + b] = x[n, c, a*s - p + i*d, b*s - p + j*d]  (0 in the padding)
// One thread per (n, c, a, b) writing its k*k entries (neighbouring threads,
// neighbouring b: coalesced stores); grid-stride.
template <typename T>
__global__ void im2col_dilated_kernel(const T* images, long long count, DeviceGeometry g, T* columns) {
  const long long patches = g.patches_high * g.patches_wide;
  const long long total = count * g.channels * patches;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long b = index % g.patches_wide;
    const long long a = (index / g.patches_wide) % g.patches_high;
    const long long image_channel = index / patches;  // n*C + c
    const T* plane = images + image_channel * g.height * g.width;
    T* out = columns + image_channel * g.kernel * g.kernel * patches + a * g.patches_wide + b;
    const long long y0 = a * g.stride - g.padding, x0 = b * g.stride - g.padding;
    for (int i = 0; i < g.kernel; ++i) {
      const long long y = y0 + (long long)i * g.dilation;
      const bool row_inside = y >= 0 && y < g.height;
      for (int j = 0; j < g.kernel; ++j) {
        const long long x = x0 + (long long)j * g.dilation;
        *out = (row_inside && x >= 0 && x < g.width) ? plane[y * g.width + x] : T(0);
        out += patches;
      }
    }
  }
}

// The patch index a with a*s - p + i*d == y, or -1 when there is none in [0, patches).
__device__ inline long long patch_of(long long y, int i, int stride, int padding, int dilation, long long patches) {
  const long long scaled = y + padding - (long long)i * dilation;
  if (scaled < 0 || scaled % stride != 0) return -1;
  const long long a = scaled / stride;
  return a < patches ? a : -1;
}

// x[n, c, y, x] = sum of columns[n, (c*k + i)*k + j, a*Pw + b] over the
// (i, j) with a*s - p + i*d == y, b*s - p + j*d == x (the adjoint of
// im2col_dilated). One thread per pixel gathering its terms in rising (i, j):
// written once, no atomics; grid-stride.
template <typename T>
__global__ void col2im_dilated_kernel(const T* columns, long long count, DeviceGeometry g, T* images) {
  const long long patches = g.patches_high * g.patches_wide;
  const long long total = count * g.channels * g.height * g.width;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long x = index % g.width;
    const long long y = (index / g.width) % g.height;
    const T* column = columns + index / (g.height * g.width) * g.kernel * g.kernel * patches;
    T sum = T(0);
    for (int i = 0; i < g.kernel; ++i) {
      const long long a = patch_of(y, i, g.stride, g.padding, g.dilation, g.patches_high);
      if (a < 0) continue;
      for (int j = 0; j < g.kernel; ++j) {
        const long long b = patch_of(x, j, g.stride, g.padding, g.dilation, g.patches_wide);
        if (b >= 0) sum += column[(i * g.kernel + j) * patches + a * g.patches_wide + b];
      }
    }
    images[index] = sum;
  }
}

// Depthwise (Ci/G = 1, m = Co/G channels of Y per channel of X):
//   y[n, o, a, b] = sum_{i, j} w[o, i, j] x[n, o/m, a*s - p + i*d, b*s - p + j*d]
// One thread per element of Y (neighbouring b: coalesced); grid-stride.
template <typename T>
__global__ void depthwise_forward_kernel(const T* x, const T* w, long long count, long long out, DeviceGeometry g,
                                         T* y) {
  const long long patches = g.patches_high * g.patches_wide;
  const long long total = count * out * patches;
  const long long multiplier = out / g.channels;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long b = index % g.patches_wide;
    const long long a = (index / g.patches_wide) % g.patches_high;
    const long long image_channel = index / patches;  // n*out + o
    const long long o = image_channel % out, n = image_channel / out;
    const T* plane = x + (n * g.channels + o / multiplier) * g.height * g.width;
    const T* taps = w + o * g.kernel * g.kernel;
    T sum = T(0);
    for (int i = 0; i < g.kernel; ++i) {
      const long long row = a * g.stride - g.padding + (long long)i * g.dilation;
      if (row < 0 || row >= g.height) continue;
      for (int j = 0; j < g.kernel; ++j) {
        const long long col = b * g.stride - g.padding + (long long)j * g.dilation;
        if (col >= 0 && col < g.width) sum += taps[i * g.kernel + j] * plane[row * g.width + col];
      }
    }
    y[index] = sum;
  }
}

// The adjoint onto X:
//   x[n, c, h, v] = sum_{o in c's m channels, i, j: a*s - p + i*d == h, b*s - p + j*d == v} w[o, i, j] y[n, o, a, b]
// One thread per pixel of X gathering its terms (written once: no atomics); grid-stride.
template <typename T>
__global__ void depthwise_backward_data_kernel(const T* y, const T* w, long long count, long long out, DeviceGeometry g,
                                               T* x) {
  const long long patches = g.patches_high * g.patches_wide;
  const long long total = count * g.channels * g.height * g.width;
  const long long multiplier = out / g.channels;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long v = index % g.width;
    const long long h = (index / g.width) % g.height;
    const long long image_channel = index / (g.height * g.width);  // n*C + c
    const long long c = image_channel % g.channels, n = image_channel / g.channels;
    T sum = T(0);
    for (long long o = c * multiplier; o < (c + 1) * multiplier; ++o) {
      const T* plane = y + (n * out + o) * patches;
      const T* taps = w + o * g.kernel * g.kernel;
      for (int i = 0; i < g.kernel; ++i) {
        const long long a = patch_of(h, i, g.stride, g.padding, g.dilation, g.patches_high);
        if (a < 0) continue;
        for (int j = 0; j < g.kernel; ++j) {
          const long long b = patch_of(v, j, g.stride, g.padding, g.dilation, g.patches_wide);
          if (b >= 0) sum += taps[i * g.kernel + j] * plane[a * g.patches_wide + b];
        }
      }
    }
    x[index] = sum;
  }
}

// The sum of `value` over the block, valid in thread 0: warp shuffles, then
// one partial per warp through shared memory.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kThreads / 32 ? warp_sums[lane] : T(0);
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The depthwise weight gradient:
//   w_grad[o, i, j] += sum_{n, a, b} y[n, o, a, b] x[n, o/m, a*s - p + i*d, b*s - p + j*d]
// One block per (o, i, j) = blockIdx.x, its threads striding over (n, a, b)
// (neighbouring b: coalesced), then a block reduction in a fixed order: the
// same sum every run, no atomics.
template <typename T>
__global__ void depthwise_weight_grad_kernel(const T* x, const T* y, long long count, long long out, DeviceGeometry g,
                                             T* w_grad) {
  const int taps = g.kernel * g.kernel;
  const long long o = blockIdx.x / taps;
  const int tap = blockIdx.x % taps, i = tap / g.kernel, j = tap % g.kernel;
  const long long multiplier = out / g.channels;
  const long long patches = g.patches_high * g.patches_wide;
  T sum = T(0);
  for (long long index = threadIdx.x; index < count * patches; index += blockDim.x) {
    const long long b = index % g.patches_wide;
    const long long a = (index / g.patches_wide) % g.patches_high;
    const long long n = index / patches;
    const long long row = a * g.stride - g.padding + (long long)i * g.dilation;
    const long long col = b * g.stride - g.padding + (long long)j * g.dilation;
    if (row < 0 || row >= g.height || col < 0 || col >= g.width) continue;
    sum += y[(n * out + o) * patches + a * g.patches_wide + b] *
           x[((n * g.channels + o / multiplier) * g.height + row) * g.width + col];
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) w_grad[blockIdx.x] += sum;
}

// Strides of one operand of the per-(image, group) products, in elements.
struct ImageGroupStrides {
  long long image, group;
};

// C_{n,g} = op(A_{n,g}) op(B_{n,g}) (+ beta C_{n,g}) for every image n <
// count and group g < groups, operand (n, g) of X at x + n*image + g*group:
// strided-batched GEMMs over the longer of the two indices, one call per
// value of the other.
template <typename T>
void gemm_per_image_and_group(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, const T* a,
                              ImageGroupStrides sa, const T* b, ImageGroupStrides sb, T* c, ImageGroupStrides sc,
                              std::int64_t count, std::int64_t groups) {
  if (groups <= count) {
    for (std::int64_t g = 0; g < groups; ++g)
      cuda::gemm_strided_batched<T>(ctx, trans_a, trans_b, m, n, k, T(1), a + g * sa.group, sa.image, b + g * sb.group,
                                    sb.image, T(0), c + g * sc.group, sc.image, static_cast<int>(count));
  } else {
    for (std::int64_t image = 0; image < count; ++image)
      cuda::gemm_strided_batched<T>(ctx, trans_a, trans_b, m, n, k, T(1), a + image * sa.image, sa.group,
                                    b + image * sb.image, sb.group, T(0), c + image * sc.image, sc.group,
                                    static_cast<int>(groups));
  }
}

template <typename T>
void im2col_dilated_cuda(const Context& ctx, const T* images, const ConvGeometry& g, std::int64_t count, T* columns) {
  const long long threads = count * g.channels * g.column_cols();
  if (threads == 0) return;
  im2col_dilated_kernel<T>
      <<<cuda::blocks_for(threads), kThreads, 0, cuda::stream(ctx)>>>(images, count, device_geometry(g), columns);
  cuda::check_launch("im2col_dilated_kernel", __FILE__, __LINE__);
}

template <typename T>
void col2im_dilated_cuda(const Context& ctx, const T* columns, const ConvGeometry& g, std::int64_t count, T* images) {
  const long long threads = count * g.image_size();
  if (threads == 0) return;
  col2im_dilated_kernel<T>
      <<<cuda::blocks_for(threads), kThreads, 0, cuda::stream(ctx)>>>(columns, count, device_geometry(g), images);
  cuda::check_launch("col2im_dilated_kernel", __FILE__, __LINE__);
}

template <typename T>
void depthwise_forward_cuda(const Context& ctx, const T* x, const T* w, std::int64_t batch, std::int64_t out,
                            const ConvGeometry& g, T* y) {
  const long long threads = batch * out * g.column_cols();
  if (threads == 0) return;
  depthwise_forward_kernel<T>
      <<<cuda::blocks_for(threads), kThreads, 0, cuda::stream(ctx)>>>(x, w, batch, out, device_geometry(g), y);
  cuda::check_launch("depthwise_forward_kernel", __FILE__, __LINE__);
}

template <typename T>
void depthwise_backward_data_cuda(const Context& ctx, const T* y, const T* w, std::int64_t batch, std::int64_t out,
                                  const ConvGeometry& g, T* x) {
  const long long threads = batch * g.image_size();
  if (threads == 0) return;
  depthwise_backward_data_kernel<T>
      <<<cuda::blocks_for(threads), kThreads, 0, cuda::stream(ctx)>>>(y, w, batch, out, device_geometry(g), x);
  cuda::check_launch("depthwise_backward_data_kernel", __FILE__, __LINE__);
}

template <typename T>
void depthwise_weight_grad_cuda(const Context& ctx, const T* x, const T* y, std::int64_t batch, std::int64_t out,
                                const ConvGeometry& g, T* w_grad) {
  const long long blocks = out * g.kernel * g.kernel;
  if (blocks == 0 || batch == 0) return;
  depthwise_weight_grad_kernel<T><<<static_cast<unsigned int>(blocks), kThreads, 0, cuda::stream(ctx)>>>(
      x, y, batch, out, device_geometry(g), w_grad);
  cuda::check_launch("depthwise_weight_grad_kernel", __FILE__, __LINE__);
}

}  // namespace

// Per chunk of images: columns = im2col(X), Y_ng = W_g columns_ng, then
// bias and activation; depthwise: the direct kernel.
void Convolution::grouped_forward_cuda(Context& ctx, const Tensor& x, bool with_bias, const FusedActivation& activation,
                                       Tensor& y) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  if (batch == 0) return;
  const std::int64_t group_rows = rows / groups_, group_out = out / groups_;
  const bool bias = with_bias && has_bias_;
  const DType dtype = parameter("weight").value.dtype();
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor x_values = f32_stand_in(ctx, x, scratch.x_f32);
  F32Output y_values(ctx, y, scratch.y_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* weight = parameter("weight").value.data<T>();
    const T* x_data = x_values.data<T>();
    T* y_data = y_values.f32().data<T>();
    if (depthwise(x.shape())) {
      depthwise_forward_cuda(ctx, x_data, weight, batch, out, g, y_data);
    } else {
      const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
      T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t count = std::min(chunk, batch - first);
        im2col_dilated_cuda(ctx, x_data + first * g.image_size(), g, count, columns);
        // Y_ng[out/G, P] = W_g[out/G, K/G] columns_ng[K/G, P]
        gemm_per_image_and_group<T>(ctx, false, false, static_cast<int>(group_out), static_cast<int>(patches),
                                    static_cast<int>(group_rows), weight, {0, group_out * group_rows}, columns,
                                    {rows * patches, group_rows * patches}, y_data + first * out * patches,
                                    {out * patches, group_out * patches}, count, groups_);
      }
    }
    add_channel_bias_cuda(ctx, bias ? parameter("bias").value.data<T>() : nullptr, activation, batch, out, patches,
                          y_data);
  });
  y_values.store(ctx);
}

// Per chunk of images: columns_ng = W_g^T Y_ng, X = col2im(columns), then
// bias and activation; depthwise: the direct kernel.
void Convolution::grouped_backward_data_cuda(Context& ctx, const Tensor& y, bool with_bias,
                                             const FusedActivation& activation, Tensor& x) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = y.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  if (batch == 0) return;
  const std::int64_t group_rows = rows / groups_, group_out = out / groups_;
  const bool bias = with_bias && has_bias_;
  const DType dtype = parameter("weight").value.dtype();
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor y_values = f32_stand_in(ctx, y, scratch.y_f32);
  F32Output x_values(ctx, x, scratch.x_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* weight = parameter("weight").value.data<T>();
    const T* y_data = y_values.data<T>();
    T* x_data = x_values.f32().data<T>();
    if (depthwise(x.shape())) {
      depthwise_backward_data_cuda(ctx, y_data, weight, batch, out, g, x_data);
    } else {
      const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
      T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t count = std::min(chunk, batch - first);
        // columns_ng[K/G, P] = W_g^T[K/G, out/G] Y_ng[out/G, P]
        gemm_per_image_and_group<T>(ctx, true, false, static_cast<int>(group_rows), static_cast<int>(patches),
                                    static_cast<int>(group_out), weight, {0, group_out * group_rows},
                                    y_data + first * out * patches, {out * patches, group_out * patches}, columns,
                                    {rows * patches, group_rows * patches}, count, groups_);
        col2im_dilated_cuda(ctx, columns, g, count, x_data + first * g.image_size());
      }
    }
    add_channel_bias_cuda(ctx, bias ? parameter("bias").value.data<T>() : nullptr, activation, batch, g.channels,
                          g.height * g.width, x_data);
  });
  x_values.store(ctx);
}

// Per chunk of images, with columns = im2col(X): y_grad_ng = W_g columns_ng;
// dW_g += sum_n Y_ng columns_ng^T; x_grad = col2im(W_g^T Y_ng). Depthwise:
// the direct kernels. Then the bias gradient from output_grad.
void Convolution::grouped_backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad,
                                        const Tensor& output_grad) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  if (batch == 0) return;
  const std::int64_t group_rows = rows / groups_, group_out = out / groups_;
  const std::int64_t out_plane = out * patches, weight_size = out * group_rows;
  Parameter& weight = parameter("weight");
  const DType dtype = weight.value.dtype();
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor x_values = f32_stand_in(ctx, x, scratch.x_f32);
  const Tensor y_values = f32_stand_in(ctx, y, scratch.y_f32);
  std::optional<F32Output> x_grad_values, y_grad_values;
  if (x_grad) x_grad_values.emplace(ctx, *x_grad, scratch.x_out_f32);
  if (y_grad) y_grad_values.emplace(ctx, *y_grad, scratch.y_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight.value.data<T>();
    const T* x_data = x_values.data<T>();
    const T* y_data = y_values.data<T>();
    if (depthwise(x.shape())) {
      if (y_grad) depthwise_forward_cuda(ctx, x_data, w, batch, out, g, y_grad_values->f32().data<T>());
      depthwise_weight_grad_cuda(ctx, x_data, y_data, batch, out, g, weight.grad.data<T>());
      if (x_grad) depthwise_backward_data_cuda(ctx, y_data, w, batch, out, g, x_grad_values->f32().data<T>());
      return;
    }
    const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
    T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
    T* weight_grads = grown_scratch(ctx, scratch.weight_grads, {chunk, out, group_rows}, dtype).data<T>();
    const ImageGroupStrides weight_strides{0, group_out * group_rows};
    const ImageGroupStrides column_strides{rows * patches, group_rows * patches};
    const ImageGroupStrides y_strides{out_plane, group_out * patches};
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      const T* y_chunk = y_data + first * out_plane;
      im2col_dilated_cuda(ctx, x_data + first * g.image_size(), g, count, columns);
      if (y_grad)  // y_grad_ng[out/G, P] = W_g[out/G, K/G] columns_ng[K/G, P]
        gemm_per_image_and_group<T>(ctx, false, false, static_cast<int>(group_out), static_cast<int>(patches),
                                    static_cast<int>(group_rows), w, weight_strides, columns, column_strides,
                                    y_grad_values->f32().data<T>() + first * out_plane, y_strides, count, groups_);
      // G_ng[out/G, K/G] = Y_ng[out/G, P] columns_ng^T, then dW += sum_n G_n.
      gemm_per_image_and_group<T>(ctx, false, true, static_cast<int>(group_out), static_cast<int>(group_rows),
                                  static_cast<int>(patches), y_chunk, y_strides, columns, column_strides, weight_grads,
                                  {weight_size, group_out * group_rows}, count, groups_);
      accumulate_batch_sum_cuda(ctx, weight_grads, count, weight_size, weight.grad.data<T>());
      if (x_grad) {  // columns_ng = W_g^T Y_ng (the unfolded x is used), then x_grad = col2im(columns)
        gemm_per_image_and_group<T>(ctx, true, false, static_cast<int>(group_rows), static_cast<int>(patches),
                                    static_cast<int>(group_out), w, weight_strides, y_chunk, y_strides, columns,
                                    column_strides, count, groups_);
        col2im_dilated_cuda(ctx, columns, g, count, x_grad_values->f32().data<T>() + first * g.image_size());
      }
    }
  });
  if (x_grad_values) x_grad_values->store(ctx);
  if (y_grad_values) y_grad_values->store(ctx);
  accumulate_bias_grad_cuda(ctx, output_grad);
}

}  // namespace plexus::layers

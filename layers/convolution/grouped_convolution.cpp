// CPU passes of Convolution for groups or dilation other than 1
// (convolution.h): per image and group, im2col of the group's channels with
// dilated taps and Eigen products with the group's rows of the weight; when
// Ci/G = 1 (depthwise), direct loops without columns. Items (image, group,
// block of rows) or (image, channel) run in parallel. forward and
// backward_data (the passes that run on whole photos, in eval and
// compress) cut each image into blocks of rows, as convolution.cpp's, so
// that the columns grow with the image's width, not its area; the weight
// gradient's per-image parts are summed in image order. Block sizes depend
// on the shapes only: results are the same for any thread count.
#include <algorithm>

#include <Eigen/Core>

#include "convolution/convolution.h"
#include "fused_activation.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Matrix = Eigen::Map<RowMajorMatrix<T>>;
template <typename T>
using ConstMatrix = Eigen::Map<const RowMajorMatrix<T>>;
// A block of columns of a row-major matrix: rows of `stride` elements apart.
template <typename T>
using ColumnBlock = Eigen::Map<RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstColumnBlock = Eigen::Map<const RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The sizes of one pass on X [N, Ci, H, W] and Y [N, Co, Ph, Pw] in G groups.
struct GroupSizes {
  std::int64_t x_channels, y_channels;  // per group: Ci/G, Co/G
  std::int64_t rows;                    // (Ci/G)*k*k: columns of W_g, rows of a group's columns
  std::int64_t patches;                 // Ph*Pw
  std::int64_t x_plane;                 // H*W
};

GroupSizes group_sizes(const ConvGeometry& g, std::int64_t y_channels, std::int64_t groups) {
  return {g.channels / groups, y_channels / groups, g.channels / groups * g.kernel * g.kernel,
          g.patches_high * g.patches_wide, g.height * g.width};
}

// columns[(c*k + i)*k + j, (a - first)*Pw + b] = x[c, a*s - p + i*d, b*s - p + j*d]
// (0 in the padding) for the `channels` planes at `image` and the patch rows
// a in [first, end).
template <typename T>
void im2col_dilated(const T* image, const ConvGeometry& g, std::int64_t channels, std::int64_t first, std::int64_t end,
                    T* columns) {
  const std::int64_t patches = (end - first) * g.patches_wide;
  for (std::int64_t c = 0; c < channels; ++c) {
    const T* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel; ++i)
      for (std::int64_t j = 0; j < g.kernel; ++j) {
        T* row = columns + ((c * g.kernel + i) * g.kernel + j) * patches;
        for (std::int64_t a = first; a < end; ++a) {
          const std::int64_t y = a * g.stride - g.padding + i * g.dilation;
          T* out = row + (a - first) * g.patches_wide;
          if (y < 0 || y >= g.height) {
            std::fill(out, out + g.patches_wide, T(0));
            continue;
          }
          for (std::int64_t b = 0; b < g.patches_wide; ++b) {
            const std::int64_t x = b * g.stride - g.padding + j * g.dilation;
            out[b] = (x >= 0 && x < g.width) ? plane[y * g.width + x] : T(0);
          }
        }
      }
  }
}

// The adjoint: ADDS to the image rows [first_row, end_row) of the
// `channels` planes the entries of `columns` (laid out as im2col_dilated's
// for the patch rows [first, end)) that im2col_dilated copies from them,
// each pixel's in rising (i, j, a, b).
template <typename T>
void col2im_dilated(const T* columns, const ConvGeometry& g, std::int64_t channels, std::int64_t first,
                    std::int64_t end, std::int64_t first_row, std::int64_t end_row, T* image) {
  const std::int64_t patches = (end - first) * g.patches_wide;
  for (std::int64_t c = 0; c < channels; ++c) {
    T* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel; ++i)
      for (std::int64_t j = 0; j < g.kernel; ++j) {
        const T* row = columns + ((c * g.kernel + i) * g.kernel + j) * patches;
        for (std::int64_t a = first; a < end; ++a) {
          const std::int64_t y = a * g.stride - g.padding + i * g.dilation;
          if (y < first_row || y >= end_row) continue;
          for (std::int64_t b = 0; b < g.patches_wide; ++b) {
            const std::int64_t x = b * g.stride - g.padding + j * g.dilation;
            if (x >= 0 && x < g.width) plane[y * g.width + x] += row[(a - first) * g.patches_wide + b];
          }
        }
      }
  }
}

// Depthwise (one channel of X per channel of Y): y[a, b] = sum_{i, j}
// w[i, j] x[a*s - p + i*d, b*s - p + j*d] for one plane pair, overwriting y.
template <typename T>
void depthwise_forward_plane(const T* x, const T* w, const ConvGeometry& g, T* y) {
  for (std::int64_t a = 0; a < g.patches_high; ++a)
    for (std::int64_t b = 0; b < g.patches_wide; ++b) {
      T sum = T(0);
      for (std::int64_t i = 0; i < g.kernel; ++i) {
        const std::int64_t row = a * g.stride - g.padding + i * g.dilation;
        if (row < 0 || row >= g.height) continue;
        for (std::int64_t j = 0; j < g.kernel; ++j) {
          const std::int64_t col = b * g.stride - g.padding + j * g.dilation;
          if (col >= 0 && col < g.width) sum += w[i * g.kernel + j] * x[row * g.width + col];
        }
      }
      y[a * g.patches_wide + b] = sum;
    }
}

// The adjoint onto x: x[a*s - p + i*d, b*s - p + j*d] += w[i, j] y[a, b]
// (x not cleared here), and the weight gradient of the same plane pair:
// w_grad[i, j] += sum_{a, b} y[a, b] x[a*s - p + i*d, b*s - p + j*d].
template <typename T>
void depthwise_backward_plane(const T* x, const T* y, const T* w, const ConvGeometry& g, T* x_grad, T* w_grad) {
  for (std::int64_t i = 0; i < g.kernel; ++i)
    for (std::int64_t j = 0; j < g.kernel; ++j) {
      const T tap = w[i * g.kernel + j];
      T tap_grad = T(0);
      for (std::int64_t a = 0; a < g.patches_high; ++a) {
        const std::int64_t row = a * g.stride - g.padding + i * g.dilation;
        if (row < 0 || row >= g.height) continue;
        for (std::int64_t b = 0; b < g.patches_wide; ++b) {
          const std::int64_t col = b * g.stride - g.padding + j * g.dilation;
          if (col < 0 || col >= g.width) continue;
          const T dy = y[a * g.patches_wide + b];
          if (x_grad) x_grad[row * g.width + col] += tap * dy;
          if (w_grad) tap_grad += dy * x[row * g.width + col];
        }
      }
      if (w_grad) w_grad[i * g.kernel + j] += tap_grad;
    }
}

// Bias (when given) and the fused activation on `count` elements of each of
// `channels` planes `stride` elements apart.
template <typename T>
void finish_planes(T* planes, const T* bias, std::int64_t channels, std::int64_t count, std::int64_t stride,
                   const FusedActivation& activation) {
  ColumnBlock<T> values(planes, channels, count, Eigen::OuterStride<>(stride));
  if (bias) values.colwise() += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(bias, channels);
  apply_fused_activation(values.array(), activation);
}

}  // namespace

// Per image n, group and block of patch rows [a0, a1): the block's columns
// of Y_ng = W_g im2col(X_ng) (+ bias); depthwise, per channel o of Y: the
// direct sum over its kernel.
void Convolution::grouped_forward_cpu(const Tensor& x, bool with_bias, const FusedActivation& activation, Tensor& y) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const GroupSizes s = group_sizes(g, y.dim(1), groups_);
  const std::int64_t batch = x.dim(0), out = y.dim(1);
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* weight = parameter("weight").value.data<T>();
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    if (depthwise(x.shape())) {  // channel o of Y reads channel o / (Co/G) of X
      const std::int64_t taps = g.kernel * g.kernel;
      parallel_for(batch * out, [&](std::int64_t item) {
        const std::int64_t n = item / out, o = item % out;
        T* y_plane = y.data<T>() + item * s.patches;
        depthwise_forward_plane(x.data<T>() + (n * g.channels + o / s.y_channels) * s.x_plane, weight + o * taps, g,
                                y_plane);
        finish_planes(y_plane, bias ? bias + o : nullptr, 1, s.patches, s.patches, activation);
      });
      return;
    }
    const CpuRowBlocks row_blocks(g.patches_high, cpu_patch_rows_per_block(g), cpu_block_origin_);
    const std::int64_t blocks = row_blocks.count();
    parallel_for(batch * groups_ * blocks, [&](std::int64_t item) {
      const std::int64_t n = item / (groups_ * blocks), group = item / blocks % groups_;
      const std::int64_t first = row_blocks.first(item % blocks), end = row_blocks.end(item % blocks);
      const std::int64_t block_patches = (end - first) * g.patches_wide;
      RowMajorMatrix<T> columns(s.rows, block_patches);
      im2col_dilated(x.data<T>() + (n * g.channels + group * s.x_channels) * s.x_plane, g, s.x_channels, first, end,
                     columns.data());
      T* y_block = y.data<T>() + (n * out + group * s.y_channels) * s.patches + first * g.patches_wide;
      ColumnBlock<T>(y_block, s.y_channels, block_patches, Eigen::OuterStride<>(s.patches)).noalias() =
          ConstMatrix<T>(weight + group * s.y_channels * s.rows, s.y_channels, s.rows) * columns;
      finish_planes(y_block, bias ? bias + group * s.y_channels : nullptr, s.y_channels, block_patches, s.patches,
                    activation);
    });
  });
}

// Per image n, group and block of image rows [h0, h1): the patch rows
// [a0, a1) whose kernels reach those rows give columns = W_g^T Y_ng[:,
// a0*Pw : a1*Pw], and the rows [h0, h1) of X_ng = col2im(columns) (+ bias);
// blocks write disjoint rows. Depthwise, per channel c of X: the adjoint
// sums of the Co/G channels of Y that read it.
void Convolution::grouped_backward_data_cpu(const Tensor& y, bool with_bias, const FusedActivation& activation,
                                            Tensor& x) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const GroupSizes s = group_sizes(g, y.dim(1), groups_);
  const std::int64_t batch = y.dim(0), out = y.dim(1);
  dispatch_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* weight = parameter("weight").value.data<T>();
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    if (depthwise(x.shape())) {
      const std::int64_t taps = g.kernel * g.kernel;
      parallel_for(batch * g.channels, [&](std::int64_t item) {
        const std::int64_t n = item / g.channels, c = item % g.channels;
        T* x_plane = x.data<T>() + item * s.x_plane;
        std::fill(x_plane, x_plane + s.x_plane, T(0));
        for (std::int64_t o = c * s.y_channels; o < (c + 1) * s.y_channels; ++o)
          depthwise_backward_plane<T>(nullptr, y.data<T>() + (n * out + o) * s.patches, weight + o * taps, g, x_plane,
                                      nullptr);
        finish_planes(x_plane, bias ? bias + c : nullptr, 1, s.x_plane, s.x_plane, activation);
      });
      return;
    }
    const CpuRowBlocks row_blocks(g.height, cpu_image_rows_per_block(g), cpu_block_origin_);
    const std::int64_t blocks = row_blocks.count();
    parallel_for(batch * groups_ * blocks, [&](std::int64_t item) {
      const std::int64_t n = item / (groups_ * blocks), group = item / blocks % groups_;
      const std::int64_t h0 = row_blocks.first(item % blocks), h1 = row_blocks.end(item % blocks);
      // Patch row a reaches image rows a*s - p .. a*s - p + (k - 1)*d.
      const std::int64_t lowest = h0 + g.padding - g.dilation * (g.kernel - 1);
      const std::int64_t a0 = std::min(g.patches_high, lowest <= 0 ? 0 : ceil_div(lowest, g.stride));
      const std::int64_t a1 = std::min(g.patches_high, (h1 - 1 + g.padding) / g.stride + 1);
      T* x_group = x.data<T>() + (n * g.channels + group * s.x_channels) * s.x_plane;
      for (std::int64_t c = 0; c < s.x_channels; ++c)
        std::fill(x_group + c * s.x_plane + h0 * g.width, x_group + c * s.x_plane + h1 * g.width, T(0));
      if (a0 < a1) {
        RowMajorMatrix<T> columns(s.rows, (a1 - a0) * g.patches_wide);
        columns.noalias() =
            ConstMatrix<T>(weight + group * s.y_channels * s.rows, s.y_channels, s.rows).transpose() *
            ConstColumnBlock<T>(y.data<T>() + (n * out + group * s.y_channels) * s.patches + a0 * g.patches_wide,
                                s.y_channels, (a1 - a0) * g.patches_wide, Eigen::OuterStride<>(s.patches));
        col2im_dilated(columns.data(), g, s.x_channels, a0, a1, h0, h1, x_group);
      }
      finish_planes(x_group + h0 * g.width, bias ? bias + group * s.x_channels : nullptr, s.x_channels,
                    (h1 - h0) * g.width, s.x_plane, activation);
    });
  });
}

// Per image n and group, with columns = im2col(X_ng): y_grad_ng = W_g
// columns; dW_g += Y_ng columns^T; x_grad_ng = col2im(W_g^T Y_ng).
// Depthwise: the same sums per channel of Y, without columns.
void Convolution::grouped_backward_cpu(const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const GroupSizes s = group_sizes(g, y.dim(1), groups_);
  const std::int64_t batch = x.dim(0), out = y.dim(1);
  const std::int64_t weight_size = out * s.rows;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    const T* w = weight.value.data<T>();
    std::vector<T> weight_parts(static_cast<std::size_t>(batch * weight_size));  // per image, summed in image order
    if (depthwise(x.shape())) {
      const std::int64_t taps = g.kernel * g.kernel;
      // Per image and channel c of X: its gradient and the weight gradients
      // of the channels of Y that read it (each written by this item only).
      parallel_for(batch * g.channels, [&](std::int64_t item) {
        const std::int64_t n = item / g.channels, c = item % g.channels;
        const T* x_plane = x.data<T>() + item * s.x_plane;
        T* x_grad_plane = x_grad ? x_grad->data<T>() + item * s.x_plane : nullptr;
        if (x_grad_plane) std::fill(x_grad_plane, x_grad_plane + s.x_plane, T(0));
        for (std::int64_t o = c * s.y_channels; o < (c + 1) * s.y_channels; ++o) {
          if (y_grad) depthwise_forward_plane(x_plane, w + o * taps, g, y_grad->data<T>() + (n * out + o) * s.patches);
          depthwise_backward_plane(x_plane, y.data<T>() + (n * out + o) * s.patches, w + o * taps, g, x_grad_plane,
                                   weight_parts.data() + n * weight_size + o * taps);
        }
      });
    } else {
      parallel_for(batch * groups_, [&](std::int64_t item) {
        const std::int64_t n = item / groups_, group = item % groups_;
        ConstMatrix<T> w_group(w + group * s.y_channels * s.rows, s.y_channels, s.rows);
        ConstMatrix<T> y_group(y.data<T>() + (n * out + group * s.y_channels) * s.patches, s.y_channels, s.patches);
        const std::int64_t x_offset = (n * g.channels + group * s.x_channels) * s.x_plane;
        RowMajorMatrix<T> columns(s.rows, s.patches);
        im2col_dilated(x.data<T>() + x_offset, g, s.x_channels, 0, g.patches_high, columns.data());
        if (y_grad)
          Matrix<T>(y_grad->data<T>() + (n * out + group * s.y_channels) * s.patches, s.y_channels, s.patches)
              .noalias() = w_group * columns;
        Matrix<T>(weight_parts.data() + n * weight_size + group * s.y_channels * s.rows, s.y_channels, s.rows)
            .noalias() = y_group * columns.transpose();
        if (x_grad) {
          columns.noalias() = w_group.transpose() * y_group;  // the unfolded x is used: overwrite it
          T* x_grad_group = x_grad->data<T>() + x_offset;
          std::fill(x_grad_group, x_grad_group + s.x_channels * s.x_plane, T(0));
          col2im_dilated(columns.data(), g, s.x_channels, 0, g.patches_high, 0, g.height, x_grad_group);
        }
      });
    }
    add_in_order(weight_parts.data(), batch, weight_size, weight.grad.data<T>());
  });
}

}  // namespace plexus::layers

#include "convolution/convolution.h"

#include <algorithm>
#include <functional>

#include <Eigen/Core>

#include "fused_activation.h"
#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"
#include "plexus/host_memory.h"

namespace plexus::layers {

Convolution::Convolution(LayerConfig& config, ImageSide image_side)
    : out_channels_(config.bounded_integer("out_channels", 1, limits::kMaxChannels)),
      kernel_(config.bounded_integer("kernel", 1, limits::kMaxConvolutionParameter)),
      stride_(config.bounded_integer("stride", 1, 1, limits::kMaxConvolutionParameter)),
      padding_(config.bounded_integer("padding", 0, 0, limits::kMaxConvolutionParameter)),
      output_padding_(image_side == ImageSide::kOutput
                          ? config.bounded_integer("output_padding", 0, 0, limits::kMaxConvolutionParameter)
                          : 0),
      groups_(config.bounded_integer("groups", 1, 1, limits::kMaxChannels)),
      dilation_(config.bounded_integer("dilation", 1, 1, limits::kMaxConvolutionParameter)),
      has_bias_(config.boolean("bias", true)),
      image_side_(image_side) {
  if (out_channels_ % groups_ != 0)
    config.fail("groups", "must divide out_channels (" + std::to_string(out_channels_) +
                              ") and the input's channels, got " + std::to_string(groups_));
}

const Shape& Convolution::checked_input(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input must be [N, C, H, W], got " + shape_str(x));
  if (x[1] < 1 || x[2] < 1 || x[3] < 1) fail_shape("input " + shape_str(x) + " must have C, H, W >= 1");
  if (x[1] % groups_ != 0)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) + " channels: groups (" +
               std::to_string(groups_) + ") must divide both the input's channels and out_channels (" +
               std::to_string(out_channels_) + ")");
  // The weight is [Co, Ci/G, k, k]: the input's channels are Ci of a Conv2d, Co of a ConvTranspose2d.
  const std::int64_t weight_channels =
      weight_shape_.empty() ? 0 : (image_side_ == ImageSide::kInput ? weight_shape_[1] * groups_ : weight_shape_[0]);
  if (!weight_shape_.empty() && x[1] != weight_channels)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) + " channels but weight " +
               shape_str(weight_shape_) + " expects " + std::to_string(weight_channels));
  // Limits keep stride, kernel and padding small; the sides need a bound too
  // ((H - 1) * stride of a ConvTranspose2d).
  if (x[2] > limits::kMaxTensorElements || x[3] > limits::kMaxTensorElements)
    fail_shape("input " + shape_str(x) + " has a side larger than " + std::to_string(limits::kMaxTensorElements));
  return x;
}

void Convolution::check_column_size(const Shape& input_shape, const ConvGeometry& geometry) const {
  const std::string problem = column_size_problem(geometry);
  if (!problem.empty()) fail_shape("input " + shape_str(input_shape) + " is too large: " + problem);
}

void Convolution::create_parameters(const std::vector<Shape>& inputs) {
  const std::int64_t channels = inputs[0][1];
  const bool input_is_image = image_side_ == ImageSide::kInput;
  const std::int64_t image_channels = input_is_image ? channels : out_channels_;   // Ci
  const std::int64_t kernel_channels = input_is_image ? out_channels_ : channels;  // Co
  const std::int64_t fan_in = image_channels / groups_ * kernel_ * kernel_;
  weight_shape_ = {kernel_channels, image_channels / groups_, kernel_, kernel_};
  declare_parameter("weight", weight_shape_, init::fan_in_uniform(fan_in));
  if (has_bias_) declare_parameter("bias", {out_channels_}, init::fan_in_uniform(fan_in));
}

ConvGeometry Convolution::geometry(const Shape& x, const Shape& y) const {
  ConvGeometry g;
  g.channels = x[1];
  g.height = x[2];
  g.width = x[3];
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  g.dilation = dilation_;
  g.patches_high = y[2];
  g.patches_wide = y[3];
  return g;
}

namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
// A block of columns of a row-major matrix: rows of `stride` elements apart.
template <typename T>
using ColumnBlock = Eigen::Map<RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstColumnBlock = Eigen::Map<const RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The forward passes cut each image into blocks of whole rows, the items of
// parallel_for with the images, so that one image spreads over every thread
// and a block's column matrix grows with the image's width, not its area
// (the whole matrix of a 12-megapixel photo takes gigabytes). A block holds at least kBlockPatches patches
// (columns of the product): enough that the product runs at full speed and
// the weight, packed again for each block, costs little beside it; few
// enough that a small latent still makes several blocks. The block sizes
// depend only on the layer and the image's shape, never on the thread count:
// Eigen may sum a product of another shape in another order, so fixed blocks
// keep every output bit the same for any number of threads.
constexpr std::int64_t kBlockPatches = 256;
// In the transposed pass a block of image rows also computes the columns of
// the patch rows whose kernels reach its neighbours' rows too (its halo,
// about (k - 1) / s patch rows, computed by both blocks); blocks of at least
// kHaloShare times the rows one kernel reaches (d (k - 1), d the dilation)
// keep that extra work below about 1 / kHaloShare of the product.
constexpr std::int64_t kHaloShare = 8;

// The transposed pass's columns of one block ([K, patches of about
// (kHaloShare + 1) * (k - 1) / s patch rows]) take hundreds of megabytes on a
// wide image of many channels (a 12-megapixel photo: [3200, 18144] floats,
// 232 MB, for each block in flight), so the block's product is computed in
// chunks of at most cpu_chunk_bytes_ (default 16 MiB) of columns, each
// folded into the image before the next. The chunks are contiguous ranges of the block's patches, each
// starting a multiple of kChunkAlignment patches after the block's first,
// the last range first (col2im_patches_cpu). Every value is the same as with
// the whole block's product: Eigen sums each entry of a product over the
// depth (here y's channels) in one fixed order unless the entry is among the
// last (rows mod its register block) rows of the product, the patches here;
// a chunk starting at a multiple of every register block (3 packets of 4, 8
// or 16 floats, or of 2, 4 or 8 doubles: 48 covers them all) puts the same
// patches in those last rows as the whole block does, as long as Eigen's
// cache blocking of the patches is a multiple of the register block or the
// whole product: true for at least kChunkMinRows rows of columns and at most
// kChunkMaxDepth channels of y (GeneralBlockPanelKernel.h's heuristic), so
// other products are never chunked. A last chunk is never shorter than
// kChunkAlignment (nor a single patch, which Eigen would run as a
// matrix-vector product).
constexpr std::int64_t kChunkAlignment = 48;
constexpr std::int64_t kChunkMinRows = 64;
constexpr std::int64_t kChunkMaxDepth = 1024;

// Patches per chunk of a transposed block of `count` patches whose columns
// have `rows` rows, from y of `depth` channels, within `max_bytes` of
// columns when it can be: `count` when not chunked.
std::int64_t chunk_patches(std::int64_t count, std::int64_t rows, std::int64_t depth, std::size_t element_size,
                           std::size_t max_bytes) {
  if (rows < kChunkMinRows || depth > kChunkMaxDepth) return count;
  const std::int64_t fit = static_cast<std::int64_t>(max_bytes / element_size) / rows;
  return std::min(count, std::max<std::int64_t>(kChunkAlignment, fit / kChunkAlignment * kChunkAlignment));
}

// Rows [first, end) of one image of a pass's input: what one block reads.
struct RowRange {
  std::int64_t first, end;
};

// A pass that may discard its input (ForwardOptions::discard_input) gives its
// rows back in bands of at least this many bytes of each channel plane: a
// thread holds at most one band per plane it has finished reading (8 MiB
// for 128 channels), and gives each band back in one call per plane.
constexpr std::size_t kDiscardBandBytes = std::size_t(64) << 10;

// Runs body(item) for the blocks [0, count), `per_image` per image. With
// `discard`, each thread takes a contiguous stripe of blocks, as
// parallel_for's static split would, runs them in order and gives back the
// rows of the input (`channels` planes of height x width per image at
// `input`) that no block left to run reads: after a block, those below the
// rows its next block reads (reads(item), rising with the item within an
// image) and above those the stripe before it reads; when it leaves an
// image, the rest of it below what the stripe after it reads. The blocks
// compute the same either way.
template <typename T>
void run_blocks(std::int64_t count, std::int64_t per_image, const std::function<void(std::int64_t)>& body, bool discard,
                const T* input, std::int64_t channels, std::int64_t height, std::int64_t width,
                const std::function<RowRange(std::int64_t)>& reads) {
  if (!discard) {
    parallel_for(count, body);
    return;
  }
  const std::int64_t stripes = std::max<std::int64_t>(1, std::min<std::int64_t>(cpu_threads(), count));
  const std::int64_t per_stripe = ceil_div(count, stripes);
  // Rows a block reads, within the image (a kernel may reach only padding).
  const auto rows_read = [&](std::int64_t item) {
    const RowRange read = reads(item);
    return RowRange{std::clamp<std::int64_t>(read.first, 0, height), std::clamp<std::int64_t>(read.end, 0, height)};
  };
  parallel_for(stripes, [&](std::int64_t stripe) {
    const std::int64_t first = stripe * per_stripe, end = std::min(count, first + per_stripe);
    std::int64_t image = -1, given_back = 0;  // rows of `image` below given_back: given back, or another stripe's
    bool continued = false;                   // whether this stripe gave back rows just below given_back
    const auto give_back = [&](std::int64_t to) {
      if (to <= given_back) return;
      for (std::int64_t c = 0; c < channels; ++c) {
        const T* plane = input + (image * channels + c) * height * width;
        host_memory::discard(plane + given_back * width, plane + to * width, continued);
      }
      given_back = to;
      continued = true;
    };
    for (std::int64_t item = first; item < end; ++item) {
      if (item / per_image != image) {
        image = item / per_image;
        continued = false;
        given_back = item > 0 && (item - 1) / per_image == image ? rows_read(item - 1).end : 0;
      }
      body(item);
      const std::int64_t next = item + 1;
      const bool next_in_image = next < count && next / per_image == image;
      if (next < end && next_in_image) {
        const std::int64_t keep_from = rows_read(next).first;
        if (static_cast<std::size_t>((keep_from - given_back) * width) * sizeof(T) >= kDiscardBandBytes)
          give_back(keep_from);
      } else {
        give_back(next_in_image ? rows_read(next).first : height);
      }
    }
  });
}

}  // namespace

std::int64_t cpu_patch_rows_per_block(const ConvGeometry& g) {
  return std::max<std::int64_t>(1, ceil_div(kBlockPatches, g.patches_wide));
}

std::int64_t cpu_image_rows_per_block(const ConvGeometry& g) {
  const std::int64_t reach = g.dilation * (g.kernel - 1);
  return std::max(cpu_patch_rows_per_block(g), ceil_div(kHaloShare * reach, g.stride)) * g.stride;
}

CpuRowBlocks::CpuRowBlocks(std::int64_t height, std::int64_t rows_per_block, std::int64_t origin)
    : height_(height), rows_per_block_(rows_per_block) {
  head_ = std::min(height, (rows_per_block - origin % rows_per_block) % rows_per_block);
  lead_ = head_ > 0 ? 1 : 0;
  count_ = lead_ + ceil_div(height - head_, rows_per_block);
}

// Per image n and block of patch rows [a0, a1): columns = im2col(x_n) of
// those rows; y_n[:, a0*Pw : a1*Pw] = activation(W columns (+ bias per row)).
void Convolution::conv_forward_cpu(const Tensor& x, bool with_bias, const FusedActivation& activation, Tensor& y,
                                   bool discard_x) {
  if (grouped_or_dilated()) return grouped_forward_cpu(x, with_bias, activation, y);
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  const CpuRowBlocks row_blocks(g.patches_high, cpu_patch_rows_per_block(g), cpu_block_origin_);
  const std::int64_t blocks = row_blocks.count();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Eigen::Map<const RowMajorMatrix<T>> weight(parameter("weight").value.data<T>(), out, rows);
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    const auto block = [&](std::int64_t item) {  // each block writes its own columns of y_n
      const std::int64_t n = item / blocks, first = row_blocks.first(item % blocks),
                         end = row_blocks.end(item % blocks);
      const std::int64_t block_patches = (end - first) * g.patches_wide;
      RowMajorMatrix<T> columns(rows, block_patches);
      im2col_rows_cpu(x.data<T>() + n * g.image_size(), g, first, end, columns.data());
      ColumnBlock<T> y_block(y.data<T>() + n * out * patches + first * g.patches_wide, out, block_patches,
                             Eigen::OuterStride<>(patches));
      y_block.noalias() = weight * columns;
      if (bias) y_block.colwise() += Eigen::Map<const Vector<T>>(bias, out);
      apply_fused_activation(y_block.array(), activation);
    };
    // Patch rows [a0, a1) read the image rows a0*s - p .. (a1 - 1)*s - p + k - 1.
    const auto reads = [&](std::int64_t item) {
      const std::int64_t first = row_blocks.first(item % blocks), end = row_blocks.end(item % blocks);
      return RowRange{std::max<std::int64_t>(0, first * g.stride - g.padding),
                      std::min(g.height, (end - 1) * g.stride - g.padding + g.kernel)};
    };
    run_blocks<T>(batch * blocks, blocks, block, discard_x, x.data<T>(), g.channels, g.height, g.width, reads);
  });
}

// Per image n and block of image rows [h0, h1): the patch rows [a0, a1)
// whose kernels reach those rows give columns = W^T y_n[:, a0*Pw : a1*Pw];
// x_n[:, h0:h1, :] = activation(the rows [h0, h1) of col2im(columns) (+ bias
// per channel)). Each block gathers everything its rows receive, so blocks write
// disjoint rows and every pixel sums its terms in col2im's order.
void Convolution::conv_backward_data_cpu(const Tensor& y, bool with_bias, const FusedActivation& activation, Tensor& x,
                                         bool discard_y) {
  if (grouped_or_dilated()) return grouped_backward_data_cpu(y, with_bias, activation, x);
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = y.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  const CpuRowBlocks row_blocks(g.height, cpu_image_rows_per_block(g), cpu_block_origin_);
  const std::int64_t blocks = row_blocks.count();
  const std::int64_t plane = g.height * g.width;
  dispatch_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Eigen::Map<const RowMajorMatrix<T>> weight(parameter("weight").value.data<T>(), out, rows);
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    // Patch row a reaches image rows a*s - p .. a*s - p + k - 1: the block of image rows
    // [h0, h1) reads the patch rows (rows of y) [a0, a1).
    const auto reads = [&](std::int64_t item) {
      const std::int64_t h0 = row_blocks.first(item % blocks), h1 = row_blocks.end(item % blocks);
      const std::int64_t lowest = h0 + g.padding - (g.kernel - 1);
      const std::int64_t a0 = lowest <= 0 ? 0 : ceil_div(lowest, g.stride);
      return RowRange{std::min(a0, g.patches_high), std::min(g.patches_high, (h1 - 1 + g.padding) / g.stride + 1)};
    };
    const auto block = [&](std::int64_t item) {  // each block writes its own rows of x_n
      const std::int64_t n = item / blocks, h0 = row_blocks.first(item % blocks), h1 = row_blocks.end(item % blocks);
      const RowRange read = reads(item);
      const std::int64_t a0 = read.first, a1 = read.end;
      T* x_n = x.data<T>() + n * g.image_size();
      for (std::int64_t c = 0; c < g.channels; ++c)
        std::fill(x_n + c * plane + h0 * g.width, x_n + c * plane + h1 * g.width, T(0));
      if (a0 < a1) {
        const std::int64_t first = a0 * g.patches_wide, count = (a1 - a0) * g.patches_wide;
        const std::int64_t chunk = chunk_patches(count, rows, out, sizeof(T), cpu_chunk_bytes_);
        // Chunk starts: first + m * chunk; the last chunk also takes a remainder shorter than kChunkAlignment.
        std::int64_t last_start = (count - 1) / chunk * chunk;
        if (last_start > 0 && count - last_start < kChunkAlignment) last_start -= chunk;
        RowMajorMatrix<T> columns(rows, last_start > 0 ? std::max(chunk, count - last_start) : count);
        for (std::int64_t start = last_start, end = count; start >= 0; end = start, start -= chunk) {
          ConstColumnBlock<T> y_chunk(y.data<T>() + n * out * patches + first + start, out, end - start,
                                      Eigen::OuterStride<>(patches));
          Eigen::Map<RowMajorMatrix<T>> chunk_columns(columns.data(), rows, end - start);
          chunk_columns.noalias() = weight.transpose() * y_chunk;
          col2im_patches_cpu(chunk_columns.data(), g, first + start, first + end, h0, h1, x_n);
        }
      }
      ColumnBlock<T> rows_written(x_n + h0 * g.width, g.channels, (h1 - h0) * g.width, Eigen::OuterStride<>(plane));
      if (bias) rows_written.colwise() += Eigen::Map<const Vector<T>>(bias, g.channels);
      apply_fused_activation(rows_written.array(), activation);
    };
    run_blocks<T>(batch * blocks, blocks, block, discard_y, y.data<T>(), out, g.patches_high, g.patches_wide, reads);
  });
}

// Per image n: columns = im2col(x_n); y_grad_n = W columns; dW += y_n
// columns^T; x_grad_n = col2im(W^T y_n).
void Convolution::conv_backward_cpu(const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad) {
  if (grouped_or_dilated()) return grouped_backward_cpu(x, y, x_grad, y_grad);
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    Eigen::Map<const RowMajorMatrix<T>> w(weight.value.data<T>(), out, rows);
    // Each image's weight gradient goes to its own slot, summed in image
    // order afterwards: the same result for any thread count.
    const std::int64_t weight_size = out * rows;
    std::vector<T> weight_parts(static_cast<std::size_t>(batch * weight_size));
    parallel_for(batch, [&](std::int64_t n) {
      Eigen::Map<const RowMajorMatrix<T>> y_n(y.data<T>() + n * out * patches, out, patches);
      RowMajorMatrix<T> columns(rows, patches);
      im2col_cpu(x.data<T>() + n * g.image_size(), g, columns.data());
      if (y_grad)
        Eigen::Map<RowMajorMatrix<T>>(y_grad->data<T>() + n * out * patches, out, patches).noalias() = w * columns;
      Eigen::Map<RowMajorMatrix<T>>(weight_parts.data() + n * weight_size, out, rows).noalias() =
          y_n * columns.transpose();
      if (x_grad) {
        columns.noalias() = w.transpose() * y_n;  // the unfolded x is used: overwrite it
        col2im_cpu(columns.data(), g, x_grad->data<T>() + n * g.image_size());
      }
    });
    add_in_order(weight_parts.data(), batch, weight_size, weight.grad.data<T>());
  });
}

// dbias[c] += sum over pixels of output_grad_n[c], each image's sums in its
// own slot, added in image order.
void Convolution::accumulate_bias_grad_cpu(const Tensor& output_grad) {
  if (!has_bias_) return;
  const std::int64_t batch = output_grad.dim(0), channels = output_grad.dim(1);
  const std::int64_t pixels = output_grad.dim(2) * output_grad.dim(3);
  dispatch_float(output_grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> bias_parts(static_cast<std::size_t>(batch * channels));
    parallel_for(batch, [&](std::int64_t n) {
      Eigen::Map<Vector<T>>(bias_parts.data() + n * channels, channels) =
          Eigen::Map<const RowMajorMatrix<T>>(output_grad.data<T>() + n * channels * pixels, channels, pixels)
              .rowwise()
              .sum();
    });
    add_in_order(bias_parts.data(), batch, channels, parameter("bias").grad.data<T>());
  });
}

}  // namespace plexus::layers

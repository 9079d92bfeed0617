#include "convolution/convolution.h"

#include <Eigen/Core>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

Convolution::Convolution(LayerConfig& config, ImageSide image_side)
    : out_channels_(config.bounded_integer("out_channels", 1, limits::kMaxChannels)),
      kernel_(config.bounded_integer("kernel", 1, limits::kMaxConvolutionParameter)),
      stride_(config.bounded_integer("stride", 1, 1, limits::kMaxConvolutionParameter)),
      padding_(config.bounded_integer("padding", 0, 0, limits::kMaxConvolutionParameter)),
      output_padding_(image_side == ImageSide::kOutput
                          ? config.bounded_integer("output_padding", 0, 0, limits::kMaxConvolutionParameter)
                          : 0),
      has_bias_(config.boolean("bias", true)),
      image_side_(image_side) {}

const Shape& Convolution::checked_input(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input must be [N, C, H, W], got " + shape_str(x));
  if (x[1] < 1 || x[2] < 1 || x[3] < 1) fail_shape("input " + shape_str(x) + " must have C, H, W >= 1");
  // The weight is [Co, Ci, k, k]: the input's channels are Ci of a Conv2d, Co of a ConvTranspose2d.
  const std::int64_t weight_channels =
      weight_shape_.empty() ? 0 : weight_shape_[image_side_ == ImageSide::kInput ? 1 : 0];
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
  const std::int64_t image_channels = input_is_image ? channels : out_channels_;  // Ci
  const std::int64_t kernel_channels = input_is_image ? out_channels_ : channels;  // Co
  const std::int64_t fan_in = image_channels * kernel_ * kernel_;
  weight_shape_ = {kernel_channels, image_channels, kernel_, kernel_};
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
  g.patches_high = y[2];
  g.patches_wide = y[3];
  return g;
}

namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// image[c, q] += bias[c] for an image [channels, pixels].
template <typename T>
void add_bias(const T* bias, std::int64_t channels, std::int64_t pixels, T* image) {
  Eigen::Map<RowMajorMatrix<T>>(image, channels, pixels).colwise() += Eigen::Map<const Vector<T>>(bias, channels);
}

}  // namespace

// Per image n: columns = im2col(x_n); y_n = W columns (+ bias per row).
void Convolution::conv_forward_cpu(const Tensor& x, bool with_bias, Tensor& y) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Eigen::Map<const RowMajorMatrix<T>> weight(parameter("weight").value.data<T>(), out, rows);
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    parallel_for(batch, [&](std::int64_t n) {  // images are independent
      RowMajorMatrix<T> columns(rows, patches);
      im2col_cpu(x.data<T>() + n * g.image_size(), g, columns.data());
      T* y_n = y.data<T>() + n * out * patches;
      Eigen::Map<RowMajorMatrix<T>>(y_n, out, patches).noalias() = weight * columns;
      if (bias) add_bias(bias, out, patches, y_n);
    });
  });
}

// Per image n: columns = W^T y_n; x_n = col2im(columns) (+ bias per channel).
void Convolution::conv_backward_data_cpu(const Tensor& y, bool with_bias, Tensor& x) {
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = y.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  dispatch_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Eigen::Map<const RowMajorMatrix<T>> weight(parameter("weight").value.data<T>(), out, rows);
    const T* bias = with_bias && has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    parallel_for(batch, [&](std::int64_t n) {  // images are independent
      Eigen::Map<const RowMajorMatrix<T>> y_n(y.data<T>() + n * out * patches, out, patches);
      RowMajorMatrix<T> columns(rows, patches);
      columns.noalias() = weight.transpose() * y_n;
      T* x_n = x.data<T>() + n * g.image_size();
      col2im_cpu(columns.data(), g, x_n);
      if (bias) add_bias(bias, g.channels, g.height * g.width, x_n);
    });
  });
}

// Per image n: columns = im2col(x_n); y_grad_n = W columns; dW += y_n
// columns^T; x_grad_n = col2im(W^T y_n).
void Convolution::conv_backward_cpu(const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad) {
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

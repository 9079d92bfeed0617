#include "conv_transpose2d/conv_transpose2d.h"

#include <Eigen/Core>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

ConvTranspose2d::ConvTranspose2d(LayerConfig& config)
    : out_channels_(config.bounded_integer("out_channels", 1, limits::kMaxChannels)),
      kernel_(config.bounded_integer("kernel", 1, limits::kMaxConvolutionParameter)),
      stride_(config.bounded_integer("stride", 1, 1, limits::kMaxConvolutionParameter)),
      padding_(config.bounded_integer("padding", 0, 0, limits::kMaxConvolutionParameter)),
      output_padding_(config.bounded_integer("output_padding", 0, 0, limits::kMaxConvolutionParameter)),
      has_bias_(config.boolean("bias", true)) {
  if (output_padding_ >= stride_)
    config.fail("output_padding",
                "must be < stride (" + std::to_string(stride_) + "), got " + std::to_string(output_padding_));
}

std::vector<Shape> ConvTranspose2d::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input must be [N, C, H, W], got " + shape_str(x));
  if (x[1] < 1 || x[2] < 1 || x[3] < 1) fail_shape("input " + shape_str(x) + " must have C, H, W >= 1");
  if (!weight_shape_.empty() && x[1] != weight_shape_[0])
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) + " channels but weight " +
               shape_str(weight_shape_) + " expects " + std::to_string(weight_shape_[0]));
  // Limits keep stride, kernel and padding small; (H - 1) * stride needs H bounded.
  if (x[2] > limits::kMaxTensorElements || x[3] > limits::kMaxTensorElements)
    fail_shape("input " + shape_str(x) + " has a side larger than " + std::to_string(limits::kMaxTensorElements));
  const ConvGeometry g = geometry(x);
  const std::string problem = column_size_problem(g);
  if (!problem.empty()) fail_shape("input " + shape_str(x) + " is too large: " + problem);
  if (g.height < 1 || g.width < 1)
    fail_shape("input " + shape_str(x) + " gives an empty output " +
               shape_str({x[0], out_channels_, g.height, g.width}) +
               ": (H - 1)*stride - 2*padding + kernel + output_padding must be >= 1");
  return {{x[0], out_channels_, g.height, g.width}};
}

ConvGeometry ConvTranspose2d::geometry(const Shape& input_shape) const {
  ConvGeometry g;
  g.channels = out_channels_;
  g.height = (input_shape[2] - 1) * stride_ - 2 * padding_ + kernel_ + output_padding_;
  g.width = (input_shape[3] - 1) * stride_ - 2 * padding_ + kernel_ + output_padding_;
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  // A stride-s convolution of the output maps it back to H x W, since
  // (Ho + 2p - k)/s + 1 = H - 1 + floor(output_padding/s) + 1 = H.
  g.patches_high = input_shape[2];
  g.patches_wide = input_shape[3];
  return g;
}

std::int64_t ConvTranspose2d::images_per_cuda_chunk(const Shape& input_shape,
                                                    std::size_t element_size) const {
  const ConvGeometry g = geometry(input_shape);
  const std::int64_t weight_size = input_shape[1] * g.column_rows();
  return images_per_chunk(g.column_size() + weight_size, element_size, input_shape[0], scratch_limit_);
}

void ConvTranspose2d::create_parameters(const std::vector<Shape>& inputs) {
  const std::int64_t channels = inputs[0][1];
  const std::int64_t fan_in = out_channels_ * kernel_ * kernel_;  // PyTorch: weight.size(1) * k * k
  weight_shape_ = {channels, out_channels_, kernel_, kernel_};
  declare_parameter("weight", weight_shape_, init::fan_in_uniform(fan_in));
  if (has_bias_) declare_parameter("bias", {out_channels_}, init::fan_in_uniform(fan_in));
}

// Per image n: columns = W^T x_n [out*k*k, H*W]; y_n = col2im(columns) (+ bias per channel).
void ConvTranspose2d::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  Tensor& y = *outputs[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), channels = x.dim(1), rows = g.column_rows(), pixels = g.column_cols();
  const std::int64_t out_pixels = g.height * g.width;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Matrix> weight(parameter("weight").value.data<T>(), channels, rows);
    const T* bias = has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    parallel_for(batch, [&](std::int64_t n) {  // images are independent
      Eigen::Map<const Matrix> x_n(x.data<T>() + n * channels * pixels, channels, pixels);
      Matrix columns(rows, pixels);
      columns.noalias() = weight.transpose() * x_n;
      T* y_n = y.data<T>() + n * g.image_size();
      col2im_cpu(columns.data(), g, y_n);
      if (bias)
        Eigen::Map<Matrix>(y_n, out_channels_, out_pixels).colwise() += Eigen::Map<const Vector>(bias, out_channels_);
    });
  });
}

// Per image n: columns = im2col(dy_n); dx_n = W columns; dW += x_n columns^T;
// dbias += per-channel sums of dy_n.
void ConvTranspose2d::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                   const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  const Tensor& dy = *output_grads[0];
  Tensor* dx = input_grads[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), channels = x.dim(1), rows = g.column_rows(), pixels = g.column_cols();
  const std::int64_t out_pixels = g.height * g.width;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    Parameter& weight = parameter("weight");
    Eigen::Map<const Matrix> w(weight.value.data<T>(), channels, rows);
    // Each image's weight and bias gradients go to its own slot, summed in
    // image order afterwards: the same result for any thread count.
    const std::int64_t weight_size = channels * rows;
    std::vector<T> weight_parts(static_cast<std::size_t>(batch * weight_size));
    std::vector<T> bias_parts(static_cast<std::size_t>(has_bias_ ? batch * out_channels_ : 0));
    parallel_for(batch, [&](std::int64_t n) {
      const T* dy_n = dy.data<T>() + n * g.image_size();
      Eigen::Map<const Matrix> x_n(x.data<T>() + n * channels * pixels, channels, pixels);
      Matrix columns(rows, pixels);
      im2col_cpu(dy_n, g, columns.data());
      if (dx)
        Eigen::Map<Matrix>(dx->data<T>() + n * channels * pixels, channels, pixels).noalias() = w * columns;
      Eigen::Map<Matrix>(weight_parts.data() + n * weight_size, channels, rows).noalias() = x_n * columns.transpose();
      if (has_bias_)
        Eigen::Map<Vector>(bias_parts.data() + n * out_channels_, out_channels_) =
            Eigen::Map<const Matrix>(dy_n, out_channels_, out_pixels).rowwise().sum();
    });
    add_in_order(weight_parts.data(), batch, weight_size, weight.grad.data<T>());
    if (has_bias_) add_in_order(bias_parts.data(), batch, out_channels_, parameter("bias").grad.data<T>());
  });
}

void register_conv_transpose2d(Registry& registry) {
  registry.add(
      "ConvTranspose2d", [](LayerConfig& config) { return std::make_unique<ConvTranspose2d>(config); },
      "2-D transposed convolution (PyTorch ConvTranspose2d): weight [C, out, k, k], bias [out]");
}

}  // namespace plexus::layers

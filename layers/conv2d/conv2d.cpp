#include "conv2d/conv2d.h"

#include <Eigen/Core>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

Conv2d::Conv2d(LayerConfig& config)
    : out_channels_(config.bounded_integer("out_channels", 1, limits::kMaxChannels)),
      kernel_(config.bounded_integer("kernel", 1, limits::kMaxConvolutionParameter)),
      stride_(config.bounded_integer("stride", 1, 1, limits::kMaxConvolutionParameter)),
      padding_(config.bounded_integer("padding", 0, 0, limits::kMaxConvolutionParameter)),
      has_bias_(config.boolean("bias", true)) {}

std::vector<Shape> Conv2d::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input must be [N, C, H, W], got " + shape_str(x));
  if (x[1] < 1 || x[2] < 1 || x[3] < 1) fail_shape("input " + shape_str(x) + " must have C, H, W >= 1");
  if (!weight_shape_.empty() && x[1] != weight_shape_[1])
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) + " channels but weight " +
               shape_str(weight_shape_) + " expects " + std::to_string(weight_shape_[1]));
  // Limits keep 2 * padding small; the input sides may be anything.
  if (x[2] > limits::kMaxTensorElements || x[3] > limits::kMaxTensorElements)
    fail_shape("input " + shape_str(x) + " has a side larger than " + std::to_string(limits::kMaxTensorElements));
  if (x[2] + 2 * padding_ < kernel_ || x[3] + 2 * padding_ < kernel_)
    fail_shape("input " + shape_str(x) + " with padding " + std::to_string(padding_) +
               " is smaller than the " + std::to_string(kernel_) + "x" + std::to_string(kernel_) +
               " kernel: the output would be empty");
  const ConvGeometry g = geometry(x);
  const std::string problem = column_size_problem(g);
  if (!problem.empty()) fail_shape("input " + shape_str(x) + " is too large: " + problem);
  return {{x[0], out_channels_, g.patches_high, g.patches_wide}};
}

ConvGeometry Conv2d::geometry(const Shape& input_shape) const {
  ConvGeometry g;
  g.channels = input_shape[1];
  g.height = input_shape[2];
  g.width = input_shape[3];
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  g.patches_high = (g.height + 2 * padding_ - kernel_) / stride_ + 1;
  g.patches_wide = (g.width + 2 * padding_ - kernel_) / stride_ + 1;
  return g;
}

std::int64_t Conv2d::images_per_cuda_chunk(const Shape& input_shape, std::size_t element_size) const {
  const ConvGeometry g = geometry(input_shape);
  const std::int64_t weight_size = out_channels_ * g.column_rows();
  return images_per_chunk(g.column_size() + weight_size, element_size, input_shape[0], scratch_limit_);
}

void Conv2d::create_parameters(const std::vector<Shape>& inputs) {
  const std::int64_t channels = inputs[0][1];
  const std::int64_t fan_in = channels * kernel_ * kernel_;
  weight_shape_ = {out_channels_, channels, kernel_, kernel_};
  declare_parameter("weight", weight_shape_, init::fan_in_uniform(fan_in));
  if (has_bias_) declare_parameter("bias", {out_channels_}, init::fan_in_uniform(fan_in));
}

// Per image n: columns = im2col(x_n); y_n = W columns (+ bias per row).
void Conv2d::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  Tensor& y = *outputs[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), rows = g.column_rows(), patches = g.column_cols();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Matrix> weight(parameter("weight").value.data<T>(), out_channels_, rows);
    const T* bias = has_bias_ ? parameter("bias").value.data<T>() : nullptr;
    parallel_for(batch, [&](std::int64_t n) {  // images are independent
      Matrix columns(rows, patches);
      im2col_cpu(x.data<T>() + n * g.image_size(), g, columns.data());
      Eigen::Map<Matrix> y_n(y.data<T>() + n * out_channels_ * patches, out_channels_, patches);
      y_n.noalias() = weight * columns;
      if (bias) y_n.colwise() += Eigen::Map<const Vector>(bias, out_channels_);
    });
  });
}

// Per image n: columns = im2col(x_n); dW += dy_n columns^T; dbias += row sums
// of dy_n; dx_n = col2im(W^T dy_n).
void Conv2d::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                          const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  const Tensor& dy = *output_grads[0];
  Tensor* dx = input_grads[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), rows = g.column_rows(), patches = g.column_cols();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    Parameter& weight = parameter("weight");
    Eigen::Map<const Matrix> w(weight.value.data<T>(), out_channels_, rows);
    // Each image's weight and bias gradients go to its own slot, summed in
    // image order afterwards: the same result for any thread count.
    const std::int64_t weight_size = out_channels_ * rows;
    std::vector<T> weight_parts(static_cast<std::size_t>(batch * weight_size));
    std::vector<T> bias_parts(static_cast<std::size_t>(has_bias_ ? batch * out_channels_ : 0));
    parallel_for(batch, [&](std::int64_t n) {
      Eigen::Map<const Matrix> dy_n(dy.data<T>() + n * out_channels_ * patches, out_channels_, patches);
      Matrix columns(rows, patches);
      im2col_cpu(x.data<T>() + n * g.image_size(), g, columns.data());
      Eigen::Map<Matrix>(weight_parts.data() + n * weight_size, out_channels_, rows).noalias() =
          dy_n * columns.transpose();
      if (has_bias_) Eigen::Map<Vector>(bias_parts.data() + n * out_channels_, out_channels_) = dy_n.rowwise().sum();
      if (dx) {
        columns.noalias() = w.transpose() * dy_n;
        col2im_cpu(columns.data(), g, dx->data<T>() + n * g.image_size());
      }
    });
    add_in_order(weight_parts.data(), batch, weight_size, weight.grad.data<T>());
    if (has_bias_) add_in_order(bias_parts.data(), batch, out_channels_, parameter("bias").grad.data<T>());
  });
}

void register_conv2d(Registry& registry) {
  registry.add(
      "Conv2d", [](LayerConfig& config) { return std::make_unique<Conv2d>(config); },
      "2-D convolution (PyTorch Conv2d): weight [out, C, k, k], bias [out]");
}

}  // namespace plexus::layers

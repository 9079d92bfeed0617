#include "softmax_projection/softmax_projection.h"

#include "plexus/checked_math.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <Eigen/Core>

#include "fully_connected/dense.h"

namespace plexus::layers {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::int64_t features_of(const Shape& shape) {
  std::int64_t features = 1;
  for (std::size_t i = 1; i < shape.size(); ++i)
    features = checked_mul(features, shape[i], "the features per batch item of input " + shape_str(shape));
  return features;
}

bool is_valid_label(double label, std::int64_t vocab_size) {
  // NaN fails the first comparison.
  return label >= 0.0 && label < static_cast<double>(vocab_size) && std::floor(label) == label;
}

}  // namespace

SoftmaxProjection::SoftmaxProjection(LayerConfig& config)
    : vocab_size_(config.bounded_integer("vocab_size", 1, limits::kMaxChannels)), bias_(config.boolean("bias", true)) {}

std::vector<Shape> SoftmaxProjection::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2)
    fail_shape("takes 2 inputs (features [N, F] and labels [N]), got " + std::to_string(inputs.size()));
  const Shape& features = inputs[0];
  const Shape& labels = inputs[1];
  if (features.size() < 2)
    fail_shape("features must be [N, ...] with at least 2 dimensions (batch and features), got " + shape_str(features));
  std::int64_t count = features_of(features);
  if (count < 1) fail_shape("features " + shape_str(features) + " have no features per batch item");
  if (features[0] < 1)
    fail_shape("features " + shape_str(features) + " have an empty batch; the mean loss needs N >= 1");
  if (labels.size() != 1 || labels[0] != features[0])
    fail_shape("labels must be [N] = [" + std::to_string(features[0]) + "] to match features " + shape_str(features) +
               ", got " + shape_str(labels));
  if (in_features_ > 0 && count != in_features_)
    fail_shape("features " + shape_str(features) + " have " + std::to_string(count) +
               " features per batch item, but the weight was created as " + shape_str({vocab_size_, in_features_}) +
               " for " + std::to_string(in_features_));
  return {Shape{}};
}

void SoftmaxProjection::create_parameters(const std::vector<Shape>& inputs) {
  in_features_ = features_of(inputs[0]);
  declare_parameter("weight", {vocab_size_, in_features_}, init::fan_in_uniform(in_features_));
  if (bias_) declare_parameter("bias", {vocab_size_}, init::fan_in_uniform(in_features_));
}

void SoftmaxProjection::fail_label(std::int64_t index, double value) const {
  std::ostringstream message;
  message.precision(std::numeric_limits<double>::max_digits10);
  message << who() << ": label at batch index " << index << " is " << value << "; labels must be integers in [0, "
          << vocab_size_ << ")";
  throw Error(message.str());
}

void SoftmaxProjection::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  const Eigen::Index batch = input.dim(0), features = in_features_, vocab = vocab_size_;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* labels = inputs[1]->data<T>();
    for (Eigen::Index n = 0; n < batch; ++n)
      if (!is_valid_label(static_cast<double>(labels[n]), vocab_size_)) fail_label(n, labels[n]);
    RowMatrix<T> z(batch, vocab);
    dense::forward_cpu<T>(input.data<T>(), parameter("weight").value.data<T>(),
                          bias_ ? parameter("bias").value.data<T>() : nullptr, z.data(), batch, features, vocab);
    T total = T(0);
    for (Eigen::Index n = 0; n < batch; ++n) {
      T row_max = z.row(n).maxCoeff();
      T log_normaliser = row_max + std::log((z.row(n).array() - row_max).exp().sum());
      total += log_normaliser - z(n, static_cast<Eigen::Index>(labels[n]));  // -log p[n, y_n]
    }
    outputs[0]->data<T>()[0] = total / static_cast<T>(batch);
  });
}

void SoftmaxProjection::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& input = *inputs[0];
  const Eigen::Index batch = input.dim(0), features = in_features_, vocab = vocab_size_;
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* labels = inputs[1]->data<T>();
    for (Eigen::Index n = 0; n < batch; ++n)
      if (!is_valid_label(static_cast<double>(labels[n]), vocab_size_)) fail_label(n, labels[n]);
    Parameter& weight = parameter("weight");
    // The logits are recomputed rather than kept from forward: the layer stays
    // stateless, so a forward on other inputs in between cannot go stale.
    RowMatrix<T> dz(batch, vocab);
    dense::forward_cpu<T>(input.data<T>(), weight.value.data<T>(), bias_ ? parameter("bias").value.data<T>() : nullptr,
                          dz.data(), batch, features, vocab);
    const T scale = output_grads[0]->data<T>()[0] / static_cast<T>(batch);  // g / N
    for (Eigen::Index n = 0; n < batch; ++n) {
      T row_max = dz.row(n).maxCoeff();
      dz.row(n) = (dz.row(n).array() - row_max).exp().matrix();
      dz.row(n) *= scale / dz.row(n).sum();  // (g/N) softmax(z_n)
      dz(n, static_cast<Eigen::Index>(labels[n])) -= scale;
    }
    dense::backward_cpu<T>(input.data<T>(), weight.value.data<T>(), dz.data(),
                           input_grads[0] ? input_grads[0]->data<T>() : nullptr, weight.grad.data<T>(),
                           bias_ ? parameter("bias").grad.data<T>() : nullptr, batch, features, vocab);
  });
}

void register_softmax_projection(Registry& registry) {
  registry.add(
      "SoftmaxProjection", [](LayerConfig& config) { return std::make_unique<SoftmaxProjection>(config); },
      "mean softmax cross-entropy of z = W f + b (W [vocab_size, F]) against integer labels, a scalar");
}

}  // namespace plexus::layers

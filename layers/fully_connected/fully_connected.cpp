#include "fully_connected/fully_connected.h"

#include "plexus/checked_math.h"

#include "fully_connected/dense.h"

namespace plexus::layers {

namespace {

// F: the product of every dimension after the batch axis.
std::int64_t features_of(const Shape& shape) {
  std::int64_t features = 1;
  for (std::size_t i = 1; i < shape.size(); ++i)
    features = checked_mul(features, shape[i], "the features per batch item of input " + shape_str(shape));
  return features;
}

}  // namespace

FullyConnected::FullyConnected(LayerConfig& config)
    : out_features_(config.bounded_integer("out_features", 1, limits::kMaxChannels)),
      bias_(config.boolean("bias", true)) {}

std::vector<Shape> FullyConnected::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() < 2)
    fail_shape("input must be [N, ...] with at least 2 dimensions (batch and features), got " + shape_str(x));
  std::int64_t features = features_of(x);
  if (features < 1) fail_shape("input " + shape_str(x) + " has no features per batch item");
  if (in_features_ > 0 && features != in_features_)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(features) +
               " features per batch item, but the weight was created as " + shape_str({out_features_, in_features_}) +
               " for " + std::to_string(in_features_));
  return {{x[0], out_features_}};
}

void FullyConnected::create_parameters(const std::vector<Shape>& inputs) {
  in_features_ = features_of(inputs[0]);
  declare_parameter("weight", {out_features_, in_features_}, init::fan_in_uniform(in_features_));
  if (bias_) declare_parameter("bias", {out_features_}, init::fan_in_uniform(in_features_));
}

void FullyConnected::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& input = *inputs[0];
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    dense::forward_cpu<T>(input.data<T>(), parameter("weight").value.data<T>(),
                          bias_ ? parameter("bias").value.data<T>() : nullptr, outputs[0]->data<T>(), input.dim(0),
                          in_features_, out_features_);
  });
}

void FullyConnected::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                  const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& input = *inputs[0];
  dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& weight = parameter("weight");
    dense::backward_cpu<T>(input.data<T>(), weight.value.data<T>(), output_grads[0]->data<T>(),
                           input_grads[0] ? input_grads[0]->data<T>() : nullptr, weight.grad.data<T>(),
                           bias_ ? parameter("bias").grad.data<T>() : nullptr, input.dim(0), in_features_,
                           out_features_);
  });
}

void register_fully_connected(Registry& registry) {
  registry.add(
      "FullyConnected", [](LayerConfig& config) { return std::make_unique<FullyConnected>(config); },
      "y = W x + b on the input flattened to [N, F]: weight [out_features, F], bias [out_features]");
}

}  // namespace plexus::layers

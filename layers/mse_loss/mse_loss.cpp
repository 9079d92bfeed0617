#include "mse_loss/mse_loss.h"

#include <vector>

#include <Eigen/Core>

namespace plexus::layers {

namespace {

// sum over the elements of each sample of (a - b)^2, in f64, for a viewed as [samples, per_sample].
template <typename T>
std::vector<double> sample_squared_errors(const T* a, const T* b, Eigen::Index samples, Eigen::Index per_sample) {
  using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
  std::vector<double> sums(static_cast<std::size_t>(samples));
  for (Eigen::Index n = 0; n < samples; ++n) {
    Eigen::Map<const Vector> an(a + n * per_sample, per_sample), bn(b + n * per_sample, per_sample);
    sums[static_cast<std::size_t>(n)] = (an - bn).square().template cast<double>().sum();
  }
  return sums;
}

}  // namespace

MSELoss::MSELoss(LayerConfig&) {}

std::vector<Shape> MSELoss::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    fail_shape("takes 2 inputs (a, b), got " + std::to_string(inputs.size()) +
               " (or 3: a, b and per-sample weights [N])");
  if (inputs[0] != inputs[1])
    fail_shape("input a " + shape_str(inputs[0]) + " and input b " + shape_str(inputs[1]) +
               " must have the same shape");
  if (shape_numel(inputs[0]) == 0)
    fail_shape("inputs " + shape_str(inputs[0]) + " are empty; the mean of no elements is undefined");
  if (inputs.size() == 3) {
    if (inputs[0].empty())
      fail_shape("input a " + shape_str(inputs[0]) + " has no batch dimension for per-sample weights");
    const Shape& weights = inputs[2];
    if (weights.size() != 1 || weights[0] != inputs[0][0])
      fail_shape("input weights is " + shape_str(weights) + " but must be [" + std::to_string(inputs[0][0]) +
                 "], one weight per sample of a " + shape_str(inputs[0]));
  }
  return {Shape{}};
}

void MSELoss::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    // Summed in f64 so that an f32 loss over millions of pixels keeps its digits.
    double sum = 0.0;
    if (inputs.size() == 3) {
      const Eigen::Index samples = inputs[0]->dim(0);
      const std::vector<double> sums =
          sample_squared_errors(inputs[0]->data<T>(), inputs[1]->data<T>(), samples, n / samples);
      const T* weights = inputs[2]->data<T>();
      for (Eigen::Index s = 0; s < samples; ++s) sum += static_cast<double>(weights[s]) * sums[s];
    } else {
      Eigen::Map<const Vector> a(inputs[0]->data<T>(), n);
      Eigen::Map<const Vector> b(inputs[1]->data<T>(), n);
      sum = (a - b).square().template cast<double>().sum();
    }
    outputs[0]->data<T>()[0] = static_cast<T>(sum / static_cast<double>(n));
  });
}

void MSELoss::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                           const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    const T dy = output_grads[0]->data<T>()[0];
    const T scale = dy * T(2) / static_cast<T>(n);
    if (inputs.size() == 3) {
      const Eigen::Index samples = inputs[0]->dim(0), per_sample = n / samples;
      const T* weights = inputs[2]->data<T>();
      for (Eigen::Index s = 0; s < samples; ++s) {
        const Eigen::Index offset = s * per_sample;
        Eigen::Map<const Vector> a(inputs[0]->data<T>() + offset, per_sample);
        Eigen::Map<const Vector> b(inputs[1]->data<T>() + offset, per_sample);
        const T weighted = scale * weights[s];
        if (input_grads[0]) Eigen::Map<Vector>(input_grads[0]->data<T>() + offset, per_sample) = weighted * (a - b);
        if (input_grads[1]) Eigen::Map<Vector>(input_grads[1]->data<T>() + offset, per_sample) = weighted * (b - a);
      }
      if (input_grads[2]) {
        const std::vector<double> sums =
            sample_squared_errors(inputs[0]->data<T>(), inputs[1]->data<T>(), samples, per_sample);
        T* dweights = input_grads[2]->data<T>();
        for (Eigen::Index s = 0; s < samples; ++s)
          dweights[s] = static_cast<T>(static_cast<double>(dy) * sums[s] / static_cast<double>(n));
      }
      return;
    }
    Eigen::Map<const Vector> a(inputs[0]->data<T>(), n);
    Eigen::Map<const Vector> b(inputs[1]->data<T>(), n);
    if (input_grads[0]) Eigen::Map<Vector>(input_grads[0]->data<T>(), n) = scale * (a - b);
    if (input_grads[1]) Eigen::Map<Vector>(input_grads[1]->data<T>(), n) = scale * (b - a);
  });
}

void register_mse_loss(Registry& registry) {
  registry.add(
      "MSELoss", [](LayerConfig& config) { return std::make_unique<MSELoss>(config); },
      "mean((a - b)^2) of two equal-shaped inputs, a scalar; an optional third input, weights [N], weights "
      "each sample's errors");
}

}  // namespace plexus::layers

#include "rate_loss/rate_loss.h"

#include <cmath>

#include <Eigen/Core>

namespace plexus::layers {

RateLoss::RateLoss(LayerConfig&) {}

std::vector<Shape> RateLoss::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2)
    fail_shape("takes 2 inputs (likelihoods, image), got " + std::to_string(inputs.size()));
  const Shape& likelihoods = inputs[0];
  const Shape& image = inputs[1];
  if (image.size() != 4)
    fail_shape("input 1 (image) must be [N, C, H, W], got " + shape_str(image) + " (likelihoods " +
               shape_str(likelihoods) + ")");
  if (likelihoods.empty() || likelihoods[0] != image[0])
    fail_shape("likelihoods " + shape_str(likelihoods) + " and image " + shape_str(image) +
               " must have the same batch size (axis 0)");
  if (shape_numel(image) == 0 || image[2] * image[3] == 0)
    fail_shape("image " + shape_str(image) + " has no pixels to divide the rate by");
  return {Shape{}};
}

std::int64_t rate_loss_pixel_count(const Tensor& image) { return image.dim(0) * image.dim(2) * image.dim(3); }

void RateLoss::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> p(inputs[0]->data<T>(), inputs[0]->numel());
    // -sum log2 p = -sum ln p / ln 2, summed in f64 for f32 inputs too.
    const double nats = -p.log().template cast<double>().sum();
    const double pixels = static_cast<double>(rate_loss_pixel_count(*inputs[1]));
    outputs[0]->data<T>()[0] = static_cast<T>(nats / (std::log(2.0) * pixels));
  });
}

void RateLoss::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads.size() > 1 && input_grads[1]) input_grads[1]->fill_zero();
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    Eigen::Map<const Vector> p(inputs[0]->data<T>(), n);
    const double pixels = static_cast<double>(rate_loss_pixel_count(*inputs[1]));
    const T scale =
        static_cast<T>(-static_cast<double>(output_grads[0]->data<T>()[0]) / (std::log(2.0) * pixels));
    Eigen::Map<Vector>(input_grads[0]->data<T>(), n) = scale / p;
  });
}

void register_rate_loss(Registry& registry) {
  registry.add(
      "RateLoss", [](LayerConfig& config) { return std::make_unique<RateLoss>(config); },
      "bits per pixel sum(-log2 likelihoods) / (N H W) of (likelihoods, image), a scalar");
}

}  // namespace plexus::layers

#include "rate_loss/rate_loss.h"

#include <cmath>

#include <Eigen/Core>

namespace plexus::layers {

RateLoss::RateLoss(LayerConfig&) {}

std::vector<Shape> RateLoss::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() < 2)
    fail_shape("takes 2 or more inputs (likelihoods..., image), got " + std::to_string(inputs.size()));
  const Shape& image = inputs.back();
  const std::string image_name = "input " + std::to_string(inputs.size() - 1) + " (image)";
  if (image.size() != 4)
    fail_shape(image_name + " must be [N, C, H, W], got " + shape_str(image) + " (likelihoods " + shape_str(inputs[0]) +
               ")");
  for (std::size_t k = 0; k + 1 < inputs.size(); ++k) {
    const Shape& likelihoods = inputs[k];
    if (likelihoods.empty() || likelihoods[0] != image[0])
      fail_shape((inputs.size() > 2 ? "input " + std::to_string(k) + ": " : std::string()) + "likelihoods " +
                 shape_str(likelihoods) + " and image " + shape_str(image) + " must have the same batch size (axis 0)");
  }
  if (shape_numel(image) == 0 || image[2] * image[3] == 0)
    fail_shape("image " + shape_str(image) + " has no pixels to divide the rate by");
  likelihood_inputs_ = static_cast<int>(inputs.size()) - 1;
  return {Shape{}};
}

std::int64_t rate_loss_pixel_count(const Tensor& image) { return image.dim(0) * image.dim(2) * image.dim(3); }

void RateLoss::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    // -sum log2 p = -sum ln p / ln 2, summed in f64 for f32 inputs too.
    double nats = 0.0;
    for (std::size_t k = 0; k + 1 < inputs.size(); ++k) {
      Eigen::Map<const Vector> p(inputs[k]->data<T>(), inputs[k]->numel());
      nats -= p.log().template cast<double>().sum();
    }
    const double pixels = static_cast<double>(rate_loss_pixel_count(*inputs.back()));
    outputs[0]->data<T>()[0] = static_cast<T>(nats / (std::log(2.0) * pixels));
  });
}

void RateLoss::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                            const MutableTensors& input_grads) {
  const std::size_t image = inputs.size() - 1;
  if (input_grads.size() > image && input_grads[image]) input_grads[image]->fill_zero();
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const double pixels = static_cast<double>(rate_loss_pixel_count(*inputs[image]));
    const T scale = static_cast<T>(-static_cast<double>(output_grads[0]->data<T>()[0]) / (std::log(2.0) * pixels));
    for (std::size_t k = 0; k < image; ++k) {
      if (!input_grads[k]) continue;
      const Eigen::Index n = inputs[k]->numel();
      Eigen::Map<const Vector> p(inputs[k]->data<T>(), n);
      Eigen::Map<Vector>(input_grads[k]->data<T>(), n) = scale / p;
    }
  });
}

void register_rate_loss(Registry& registry) {
  registry.add(
      "RateLoss", [](LayerConfig& config) { return std::make_unique<RateLoss>(config); },
      "bits per pixel sum(-log2 likelihoods) / (N H W) of (likelihoods..., image): the rate of one or more "
      "latents, a scalar");
}

}  // namespace plexus::layers

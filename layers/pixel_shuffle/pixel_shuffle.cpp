#include "pixel_shuffle/pixel_shuffle.h"

namespace plexus::layers {

namespace {

// Calls visit(depth, space) with the flat indices of x[n, c*r*r + i*r + j, h, w]
// and y[n, c, h*r + i, w*r + j] for every element; x has shape `input`.
template <typename Visit>
void for_each_element(const Shape& input, std::int64_t r, Visit&& visit) {
  const std::int64_t batch = input[0], channels = input[1] / (r * r), height = input[2], width = input[3];
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < r; ++j)
          for (std::int64_t h = 0; h < height; ++h)
            for (std::int64_t w = 0; w < width; ++w) {
              std::int64_t depth = ((n * channels + c) * r * r + i * r + j) * height * width + h * width + w;
              std::int64_t space = ((n * channels + c) * height * r + h * r + i) * width * r + w * r + j;
              visit(depth, space);
            }
}

}  // namespace

PixelShuffle::PixelShuffle(LayerConfig& config) : upscale_factor_(config.bounded_integer("upscale_factor", 1, 64)) {}

std::vector<Shape> PixelShuffle::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input is " + shape_str(x) + "; PixelShuffle needs [N, C, H, W]");
  const std::int64_t r = upscale_factor_;
  if (x[1] % (r * r) != 0)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) +
               " channels, not a multiple of upscale_factor^2 = " + std::to_string(r * r));
  return {{x[0], x[1] / (r * r), x[2] * r, x[3] * r}};
}

void PixelShuffle::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = inputs[0]->data<T>();
    T* y = outputs[0]->data<T>();
    for_each_element(inputs[0]->shape(), upscale_factor_,
                     [&](std::int64_t depth, std::int64_t space) { y[space] = x[depth]; });
  });
}

void PixelShuffle::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* dy = output_grads[0]->data<T>();
    T* dx = input_grads[0]->data<T>();
    for_each_element(inputs[0]->shape(), upscale_factor_,
                     [&](std::int64_t depth, std::int64_t space) { dx[depth] = dy[space]; });
  });
}

void register_pixel_shuffle(Registry& registry) {
  registry.add(
      "PixelShuffle", [](LayerConfig& config) { return std::make_unique<PixelShuffle>(config); },
      "depth-to-space: [N, C*r*r, H, W] -> [N, C, H*r, W*r] in PyTorch's order (upscale_factor r)");
}

}  // namespace plexus::layers

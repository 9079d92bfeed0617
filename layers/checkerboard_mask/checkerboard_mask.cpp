#include "checkerboard_mask/checkerboard_mask.h"

namespace plexus::layers {

namespace {

// to[i] = from[i] where (h + w) mod 2 = parity, else 0, over [N, C, H, W];
// the forward (x to y) and the backward (dy to dx) alike.
template <typename T>
void mask(const Shape& shape, std::int64_t parity, const T* from, T* to) {
  const std::int64_t planes = shape[0] * shape[1], height = shape[2], width = shape[3];
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t h = 0; h < height; ++h)
      for (std::int64_t w = 0; w < width; ++w) {
        const std::int64_t i = (p * height + h) * width + w;
        to[i] = (h + w) % 2 == parity ? from[i] : T(0);
      }
}

}  // namespace

CheckerboardMask::CheckerboardMask(LayerConfig& config) {
  const std::string keep = config.text("keep");
  if (config.is_describing()) return;
  if (keep != "even" && keep != "odd")
    config.fail("keep", "parameter 'keep' must be \"even\" (the positions with h + w even, a checkerboard's "
                        "anchors) or \"odd\", got \"" +
                            keep + "\"");
  parity_ = keep == "odd" ? 1 : 0;
}

std::vector<Shape> CheckerboardMask::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  if (inputs[0].size() != 4) fail_shape("input is " + shape_str(inputs[0]) + "; CheckerboardMask needs [N, C, H, W]");
  return {inputs[0]};
}

void CheckerboardMask::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    mask(inputs[0]->shape(), parity_, inputs[0]->data<T>(), outputs[0]->data<T>());
  });
}

void CheckerboardMask::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    mask(inputs[0]->shape(), parity_, output_grads[0]->data<T>(), input_grads[0]->data<T>());
  });
}

void register_checkerboard_mask(Registry& registry) {
  registry.add(
      "CheckerboardMask", [](LayerConfig& config) { return std::make_unique<CheckerboardMask>(config); },
      "keeps the positions (h, w) of one checkerboard colour, h + w even (keep \"even\", the anchors) or odd, and "
      "zeroes the others");
}

}  // namespace plexus::layers

#include "concat/concat.h"

#include "channel_blocks/channel_blocks.h"

namespace plexus::layers {

namespace {

bool same_but_channels(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t d = 0; d < a.size(); ++d)
    if (d != 1 && a[d] != b[d]) return false;
  return true;
}

std::vector<std::int64_t> channels_of_each(const ConstTensors& tensors) {
  std::vector<std::int64_t> channels;
  for (const Tensor* tensor : tensors) channels.push_back(channels_of(tensor->shape()));
  return channels;
}

}  // namespace

Concat::Concat(LayerConfig&) {}

std::vector<Shape> Concat::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() < 2) fail_shape("takes 2 or more inputs, got " + std::to_string(inputs.size()));
  if (inputs[0].size() < 2) fail_shape("input 0 is " + shape_str(inputs[0]) + "; Concat needs [N, C, ...]");
  Shape output = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    if (!same_but_channels(inputs[i], inputs[0]))
      fail_shape("input " + std::to_string(i) + " is " + shape_str(inputs[i]) + " but input 0 is " +
                 shape_str(inputs[0]) +
                 "; Concat joins along channels (dimension 1) and needs every other "
                 "dimension equal");
    output[1] += inputs[i][1];
  }
  return {output};
}

void Concat::forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  join_channels(ctx, inputs, *outputs[0]);
}

void Concat::backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                          const ConstTensors& output_grads, const MutableTensors& input_grads) {
  split_channels(ctx, *output_grads[0], input_grads, channels_of_each(inputs));
}

#if PLEXUS_WITH_CUDA
// The channel copies run on the context's device (channel_blocks.cu on CUDA).
void Concat::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  join_channels(ctx, inputs, *outputs[0]);
}

void Concat::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  split_channels(ctx, *output_grads[0], input_grads, channels_of_each(inputs));
}
#endif

void register_concat(Registry& registry) {
  registry.add(
      "Concat", [](LayerConfig& config) { return std::make_unique<Concat>(config); },
      "joins two or more inputs along channels (dimension 1), other dimensions equal");
}

}  // namespace plexus::layers

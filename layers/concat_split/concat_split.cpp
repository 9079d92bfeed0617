#include "concat_split/concat_split.h"

#include <numeric>

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

namespace {

std::string list_str(const std::vector<std::int64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace

Split::Split(LayerConfig& config) : sizes_(config.integers("sizes")) {
  if (sizes_.empty()) config.fail("sizes", "must list at least one channel count, got []");
  for (std::int64_t size : sizes_)
    if (size < 1) config.fail("sizes", "must hold channel counts >= 1, got " + list_str(sizes_));
}

std::vector<Shape> Split::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() < 2) fail_shape("input is " + shape_str(x) + "; Split needs [N, C, ...]");
  const std::int64_t total = std::accumulate(sizes_.begin(), sizes_.end(), std::int64_t{0});
  if (total != x[1])
    fail_shape("parameter 'sizes' " + list_str(sizes_) + " sums to " + std::to_string(total) + " but the input " +
               shape_str(x) + " has " + std::to_string(x[1]) + " channels");
  std::vector<Shape> outputs;
  for (std::int64_t size : sizes_) {
    Shape part = x;
    part[1] = size;
    outputs.push_back(part);
  }
  return outputs;
}

void Split::forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  split_channels(ctx, *inputs[0], outputs, sizes_);
}

void Split::backward_cpu(Context& ctx, const ConstTensors&, const ConstTensors&, const ConstTensors& output_grads,
                         const MutableTensors& input_grads) {
  if (input_grads[0]) join_channels(ctx, output_grads, *input_grads[0]);
}

#if PLEXUS_WITH_CUDA
// The channel copies run on the context's device (channel_blocks.cu on CUDA).
void Split::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  split_channels(ctx, *inputs[0], outputs, sizes_);
}

void Split::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&, const ConstTensors& output_grads,
                          const MutableTensors& input_grads) {
  if (input_grads[0]) join_channels(ctx, output_grads, *input_grads[0]);
}
#endif

void register_concat_split(Registry& registry) {
  registry.add(
      "Concat", [](LayerConfig& config) { return std::make_unique<Concat>(config); },
      "joins two or more inputs along channels (dimension 1), other dimensions equal");
  registry.add(
      "Split", [](LayerConfig& config) { return std::make_unique<Split>(config); },
      "cuts one input along channels (dimension 1) into slices of the given 'sizes'");
}

}  // namespace plexus::layers

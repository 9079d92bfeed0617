#include "split/split.h"

#include <numeric>

#include "channel_blocks/channel_blocks.h"

namespace plexus::layers {

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

void register_split(Registry& registry) {
  registry.add(
      "Split", [](LayerConfig& config) { return std::make_unique<Split>(config); },
      "cuts one input along channels (dimension 1) into slices of the given 'sizes'");
}

}  // namespace plexus::layers

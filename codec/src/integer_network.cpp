#include "plexus/codec/integer_network.h"

#include <algorithm>

#include "integer_network_kernels.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr std::size_t kMaxNodes = 1024;
constexpr std::int32_t kMaxChannels = 1 << 16;

[[noreturn]] void fail(const std::string& who, const std::string& problem) {
  throw IoError(who + ": integer network: " + problem);
}

std::string node_name(std::size_t index, IntegerOp op) {
  return "node " + std::to_string(index) + " (" + integer_op_name(op) + ")";
}

struct TensorInfo {
  std::int32_t channels = 0;
  bool accumulator = false;
};

void check_conv(const IntegerConvLayer& layer, bool check_values, const std::string& name, const std::string& who) {
  if (layer.in_channels < 1 || layer.out_channels < 1 || layer.out_channels > kMaxChannels || layer.kernel < 1 ||
      layer.stride < 1 || layer.padding < 0 || layer.output_padding < 0 || layer.kernel > 64 || layer.stride > 64 ||
      layer.padding > 64 || (layer.transposed ? layer.output_padding >= layer.stride : layer.output_padding != 0))
    fail(who, name + " has an impossible geometry (channels " + std::to_string(layer.in_channels) + " -> " +
                  std::to_string(layer.out_channels) + ", kernel " + std::to_string(layer.kernel) + ", stride " +
                  std::to_string(layer.stride) + ", padding " + std::to_string(layer.padding) +
                  ", output padding " + std::to_string(layer.output_padding) + ")");
  const std::int64_t taps = std::int64_t(layer.in_channels) * layer.kernel * layer.kernel;
  if (taps > kIntegerTapLimit)
    fail(who, name + " sums " + std::to_string(taps) + " products per output, more than " +
                  std::to_string(kIntegerTapLimit));
  const std::size_t weights = static_cast<std::size_t>(taps) * static_cast<std::size_t>(layer.out_channels);
  if (layer.weight.size() != weights || layer.bias.size() != static_cast<std::size_t>(layer.out_channels))
    fail(who, name + " has " + std::to_string(layer.weight.size()) + " weights and " +
                  std::to_string(layer.bias.size()) + " biases, expected " + std::to_string(weights) + " and " +
                  std::to_string(layer.out_channels));
  if (!check_values) return;
  for (std::int32_t v : layer.weight)
    if (v < -kIntegerWeightMax || v > kIntegerWeightMax)
      fail(who, name + " has a weight " + std::to_string(v) + " outside +-" + std::to_string(kIntegerWeightMax));
  for (std::int64_t b : layer.bias)
    if (b <= -kIntegerBiasLimit || b >= kIntegerBiasLimit)
      fail(who, name + " has a bias " + std::to_string(b) + " outside +-2^46");
}

// `count` multipliers in [minimum, 2^16) and shifts in [0, 62].
void check_multipliers(const std::vector<std::int64_t>& multiplier, std::int64_t minimum,
                       const std::vector<std::int32_t>& shift, std::size_t count, const std::string& what,
                       const std::string& who) {
  if (multiplier.size() != count || shift.size() != count)
    fail(who, what + " has " + std::to_string(multiplier.size()) + " multipliers and " +
                  std::to_string(shift.size()) + " shifts, expected " + std::to_string(count));
  for (std::size_t o = 0; o < count; ++o) {
    if (multiplier[o] < minimum || multiplier[o] >= kIntegerMultiplierLimit)
      fail(who, what + " has a multiplier " + std::to_string(multiplier[o]) + " outside [" +
                    std::to_string(minimum) + ", 2^16)");
    if (shift[o] < 0 || shift[o] > 62)
      fail(who, what + " has a shift " + std::to_string(shift[o]) + " outside [0, 62]");
  }
}

// The channels and kind of every tensor, checking every node on the way
// (with `check_values`, every weight, bias, multiplier and shift too).
std::vector<TensorInfo> describe(const IntegerNetwork& network, const std::string& who, bool check_values = true) {
  if (network.in_channels < 1 || network.in_channels > kMaxChannels)
    fail(who, "an input of " + std::to_string(network.in_channels) + " channels");
  if (network.nodes.empty() || network.nodes.size() > kMaxNodes)
    fail(who, std::to_string(network.nodes.size()) + " nodes (1.." + std::to_string(kMaxNodes) + " expected)");
  std::vector<TensorInfo> tensors{{network.in_channels, false}};
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const IntegerNode& node = network.nodes[n];
    const std::string name = node_name(n, node.op);
    if (node.inputs.empty() || (node.op != IntegerOp::concat && node.inputs.size() != 1))
      fail(who, name + " has " + std::to_string(node.inputs.size()) + " inputs");
    for (std::int32_t input : node.inputs)
      if (input < 0 || input > static_cast<std::int32_t>(n))
        fail(who, name + " reads tensor " + std::to_string(input) + ", which is not computed before it");
    const TensorInfo& first = tensors[static_cast<std::size_t>(node.inputs[0])];
    TensorInfo out;
    switch (node.op) {
      case IntegerOp::convolution:
        check_conv(node.conv, check_values, name, who);
        if (first.accumulator) fail(who, name + " reads an accumulator; a convolution reads activations");
        if (node.conv.in_channels != first.channels)
          fail(who, name + " expects " + std::to_string(node.conv.in_channels) + " input channels, its input has " +
                        std::to_string(first.channels));
        out = {node.conv.out_channels, true};
        break;
      case IntegerOp::rescale:
        if (!first.accumulator) fail(who, name + " reads activations; a rescale reads an accumulator");
        if (check_values) {
          check_multipliers(node.multiplier, 1, node.shift, static_cast<std::size_t>(first.channels), name, who);
          check_multipliers(node.negative_multiplier, 0, node.shift, static_cast<std::size_t>(first.channels), name,
                            who);
        }
        out = {first.channels, false};
        break;
      case IntegerOp::concat: {
        std::int64_t channels = 0;
        for (std::int32_t input : node.inputs) {
          const TensorInfo& t = tensors[static_cast<std::size_t>(input)];
          if (t.accumulator != first.accumulator) fail(who, name + " joins activations and accumulators");
          channels += t.channels;
        }
        if (channels > kMaxChannels) fail(who, name + " gives " + std::to_string(channels) + " channels");
        out = {static_cast<std::int32_t>(channels), first.accumulator};
        break;
      }
      case IntegerOp::slice:
        if (node.begin < 0 || node.count < 1 || std::int64_t(node.begin) + node.count > first.channels)
          fail(who, name + " takes channels [" + std::to_string(node.begin) + ", " +
                        std::to_string(std::int64_t(node.begin) + node.count) + ") of " +
                        std::to_string(first.channels));
        out = {node.count, first.accumulator};
        break;
      default:
        fail(who, "node " + std::to_string(n) + " has the unknown operation " +
                      std::to_string(static_cast<std::int32_t>(node.op)));
    }
    tensors.push_back(out);
  }
  return tensors;
}

// The scale indices and means of the evaluated scales and means tensors.
void read_outputs(const IntegerNetwork& network, const std::vector<std::int64_t>& scales,
                  const std::vector<std::int64_t>* means, std::int64_t plane, IntegerOutputs& out) {
  const std::int32_t count = network.levels - 1;
  out.indices.resize(scales.size());
  for (std::size_t n = 0; n < scales.size(); ++n)
    out.indices[n] = arithmetic::table_index(scales[n], network.thresholds.data() + (n / plane) * count, count);
  if (!means) return;
  out.means.resize(means->size());
  for (std::size_t n = 0; n < means->size(); ++n) {
    const std::size_t c = n / static_cast<std::size_t>(plane);
    out.means[n] = arithmetic::fixed_mean((*means)[n], network.mean_multiplier[c], network.mean_shift[c]);
  }
}

// Every tensor up to and including `last`, on the CPU.
std::vector<std::vector<std::int64_t>> evaluate(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                                std::int64_t height, std::int64_t width, std::int32_t last) {
  const auto sides = tensor_sides(network, height, width);
  std::vector<std::vector<std::int64_t>> values{clamped_input(input)};
  for (std::int32_t t = 1; t <= last; ++t) {
    const IntegerNode& node = network.nodes[static_cast<std::size_t>(t - 1)];
    // Plain copies: a lambda below reads them (C++17 lambdas cannot capture structured bindings).
    const std::int64_t out_height = sides[static_cast<std::size_t>(t)].first;
    const std::int64_t out_width = sides[static_cast<std::size_t>(t)].second;
    const std::int64_t plane = out_height * out_width;
    const std::vector<std::int64_t>& x = values[static_cast<std::size_t>(node.inputs[0])];
    std::vector<std::int64_t> y;
    switch (node.op) {
      case IntegerOp::convolution: {
        const auto [in_height, in_width] = sides[static_cast<std::size_t>(node.inputs[0])];
        const arithmetic::ConvView view =
            conv_view(node.conv, node.conv.weight.data(), node.conv.bias.data(), in_height, in_width);
        y.resize(static_cast<std::size_t>(node.conv.out_channels * plane));
        parallel_for(node.conv.out_channels, [&](std::int64_t o) {
          for (std::int64_t i = 0; i < out_height; ++i)
            for (std::int64_t j = 0; j < out_width; ++j)
              y[(o * out_height + i) * out_width + j] = arithmetic::accumulate(view, x.data(), o, i, j);
        });
        break;
      }
      case IntegerOp::rescale:
        y.resize(x.size());
        for (std::size_t n = 0; n < x.size(); ++n) {
          const std::size_t c = n / static_cast<std::size_t>(plane);
          y[n] = arithmetic::rescale(x[n], node.multiplier[c], node.negative_multiplier[c], node.shift[c]);
        }
        break;
      case IntegerOp::concat:
        for (std::int32_t in : node.inputs) {
          const std::vector<std::int64_t>& part = values[static_cast<std::size_t>(in)];
          y.insert(y.end(), part.begin(), part.end());
        }
        break;
      case IntegerOp::slice:
        y.assign(x.begin() + node.begin * plane, x.begin() + (node.begin + node.count) * plane);
        break;
    }
    values.push_back(std::move(y));
  }
  return values;
}

void check_input(const IntegerNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                 std::int64_t width) {
  if (network.nodes.empty()) throw ConfigError("integer network: the network has no nodes");
  if (height < 1 || width < 1 || static_cast<std::int64_t>(input.size()) != network.in_channels * height * width)
    throw ShapeError("integer network: an input of " + std::to_string(input.size()) + " values for [" +
                     std::to_string(network.in_channels) + ", " + std::to_string(height) + ", " +
                     std::to_string(width) + "]");
}

}  // namespace

const char* integer_op_name(IntegerOp op) {
  switch (op) {
    case IntegerOp::convolution: return "convolution";
    case IntegerOp::rescale: return "rescale";
    case IntegerOp::concat: return "concat";
    case IntegerOp::slice: return "slice";
  }
  return "unknown";
}

std::int64_t IntegerConvLayer::output_side(std::int64_t input_side) const {
  const std::int64_t side = transposed ? (input_side - 1) * stride - 2 * padding + kernel + output_padding
                                       : (input_side + 2 * padding - kernel) / stride + 1;
  if (input_side < 1 || side < 1)
    throw ShapeError("integer network: a side of " + std::to_string(input_side) + " gives an output side of " +
                     std::to_string(side));
  return side;
}

std::vector<std::int32_t> IntegerNetwork::channels() const {
  std::vector<std::int32_t> result;
  // The structure only: the values were checked once, by check_network.
  for (const TensorInfo& t : describe(*this, "IntegerNetwork::channels", false)) result.push_back(t.channels);
  return result;
}

Shape IntegerNetwork::output_shape(std::int64_t height, std::int64_t width) const {
  const auto [h, w] = tensor_sides(*this, height, width)[static_cast<std::size_t>(scales)];
  return {out_channels(), h, w};
}

std::vector<std::pair<std::int64_t, std::int64_t>> tensor_sides(const IntegerNetwork& network, std::int64_t height,
                                                                 std::int64_t width) {
  std::vector<std::pair<std::int64_t, std::int64_t>> sides{{height, width}};
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const IntegerNode& node = network.nodes[n];
    auto side = sides[static_cast<std::size_t>(node.inputs[0])];
    if (node.op == IntegerOp::convolution) side = {node.conv.output_side(side.first), node.conv.output_side(side.second)};
    if (node.op == IntegerOp::concat)
      for (std::int32_t input : node.inputs)
        if (sides[static_cast<std::size_t>(input)] != side)
          throw ShapeError("integer network: " + node_name(n, node.op) + " joins tensors of different sizes");
    sides.push_back(side);
  }
  return sides;
}

std::vector<std::int64_t> clamped_input(const std::vector<std::int32_t>& input) {
  std::vector<std::int64_t> q(input.size());
  for (std::size_t n = 0; n < input.size(); ++n)
    q[n] = std::clamp<std::int64_t>(input[n], -kIntegerActivationMax, kIntegerActivationMax);
  return q;
}

void check_network(const IntegerNetwork& network, const std::string& who) {
  const std::vector<TensorInfo> tensors = describe(network, who);
  const std::int32_t count = static_cast<std::int32_t>(tensors.size());
  if (network.scales < 0 || network.scales >= count)
    fail(who, "the scales are read from tensor " + std::to_string(network.scales) + " of " + std::to_string(count));
  const std::int32_t channels = tensors[static_cast<std::size_t>(network.scales)].channels;
  if (network.levels < 2 || network.levels > 1024)
    fail(who, "a scale table of " + std::to_string(network.levels) + " levels (2..1024 expected)");
  const std::size_t expected = static_cast<std::size_t>(channels) * static_cast<std::size_t>(network.levels - 1);
  if (network.thresholds.size() != expected)
    fail(who, std::to_string(network.thresholds.size()) + " thresholds, expected " + std::to_string(expected));
  for (std::size_t n = 0; n < expected; ++n)
    if (n % (network.levels - 1) != 0 && network.thresholds[n] < network.thresholds[n - 1])
      fail(who, "the thresholds of scale channel " + std::to_string(n / (network.levels - 1)) + " decrease");
  if (network.means < 0) {
    if (network.means != -1 || !network.mean_multiplier.empty() || !network.mean_shift.empty())
      fail(who, "mean parameters without a means tensor");
    return;
  }
  if (network.means >= count)
    fail(who, "the means are read from tensor " + std::to_string(network.means) + " of " + std::to_string(count));
  if (tensors[static_cast<std::size_t>(network.means)].channels != channels)
    fail(who, "the means have " + std::to_string(tensors[static_cast<std::size_t>(network.means)].channels) +
                  " channels, the scales " + std::to_string(channels));
  check_multipliers(network.mean_multiplier, 0, network.mean_shift, static_cast<std::size_t>(channels), "the means",
                    who);
}

IntegerOutputs run_network(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                           std::int64_t height, std::int64_t width, Device device) {
  check_input(network, input, height, width);
  const auto sides = tensor_sides(network, height, width);
  if (network.has_means() &&
      sides[static_cast<std::size_t>(network.means)] != sides[static_cast<std::size_t>(network.scales)])
    throw ShapeError("integer network: the means and the scales have different sizes");
  if (device.is_cuda()) return run_network_cuda(network, input, height, width, device.index);
  IntegerOutputs out;
  out.shape = network.output_shape(height, width);
  const auto values = evaluate(network, input, height, width, std::max(network.scales, network.means));
  read_outputs(network, values[static_cast<std::size_t>(network.scales)],
               network.has_means() ? &values[static_cast<std::size_t>(network.means)] : nullptr,
               out.shape[1] * out.shape[2], out);
  return out;
}

std::vector<std::int64_t> tensor_values(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t height, std::int64_t width, std::int32_t tensor) {
  check_input(network, input, height, width);
  if (tensor < 0 || tensor >= network.tensors())
    throw ConfigError("integer network: no tensor " + std::to_string(tensor));
  return evaluate(network, input, height, width, tensor)[static_cast<std::size_t>(tensor)];
}

}  // namespace plexus::codec

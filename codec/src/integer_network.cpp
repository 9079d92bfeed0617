#include "plexus/codec/integer_network.h"

#include <algorithm>

#include "integer_arithmetic.h"
#include "network_structure.h"
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

enum class Kind { activation, accumulator, fixed_point };
const char* kind_name(Kind kind) {
  return kind == Kind::activation ? "activations" : kind == Kind::accumulator ? "an accumulator" : "fixed-point values";
}

struct TensorInfo {
  std::int32_t channels = 0;
  Kind kind = Kind::activation;
  bool accumulator() const { return kind != Kind::activation; }
};

void check_conv(const IntegerConvLayer& layer, bool check_values, const std::string& name, const std::string& who) {
  if (layer.in_channels < 1 || layer.out_channels < 1 || layer.out_channels > kMaxChannels || layer.kernel < 1 ||
      layer.stride < 1 || layer.padding < 0 || layer.output_padding < 0 || layer.kernel > 64 || layer.stride > 64 ||
      layer.padding > 64 || (layer.transposed ? layer.output_padding >= layer.stride : layer.output_padding != 0))
    fail(who, name + " has an impossible geometry (channels " + std::to_string(layer.in_channels) + " -> " +
                  std::to_string(layer.out_channels) + ", kernel " + std::to_string(layer.kernel) + ", stride " +
                  std::to_string(layer.stride) + ", padding " + std::to_string(layer.padding) + ", output padding " +
                  std::to_string(layer.output_padding) + ")");
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
    fail(who, what + " has " + std::to_string(multiplier.size()) + " multipliers and " + std::to_string(shift.size()) +
                  " shifts, expected " + std::to_string(count));
  for (std::size_t o = 0; o < count; ++o) {
    if (multiplier[o] < minimum || multiplier[o] >= kIntegerMultiplierLimit)
      fail(who, what + " has a multiplier " + std::to_string(multiplier[o]) + " outside [" + std::to_string(minimum) +
                    ", 2^16)");
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
  std::vector<TensorInfo> tensors{{network.in_channels, Kind::activation}};
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const IntegerNode& node = network.nodes[n];
    const std::string name = node_name(n, node.op);
    const std::size_t inputs = node.op == IntegerOp::input ? 0 : node.op == IntegerOp::add ? 2 : 1;
    if (node.op == IntegerOp::concat ? node.inputs.empty() : node.inputs.size() != inputs)
      fail(who, name + " has " + std::to_string(node.inputs.size()) + " inputs");
    for (std::int32_t input : node.inputs)
      if (input < 0 || input > static_cast<std::int32_t>(n))
        fail(who, name + " reads tensor " + std::to_string(input) + ", which is not computed before it");
    const TensorInfo first = node.inputs.empty() ? TensorInfo{} : tensors[static_cast<std::size_t>(node.inputs[0])];
    TensorInfo out;
    switch (node.op) {
      case IntegerOp::convolution:
        check_conv(node.conv, check_values, name, who);
        if (first.accumulator())
          fail(who, name + " reads " + kind_name(first.kind) + "; a convolution reads activations");
        if (node.conv.in_channels != first.channels)
          fail(who, name + " expects " + std::to_string(node.conv.in_channels) + " input channels, its input has " +
                        std::to_string(first.channels));
        out = {node.conv.out_channels, Kind::accumulator};
        break;
      case IntegerOp::rescale:
        if (!first.accumulator()) fail(who, name + " reads activations; a rescale reads an accumulator");
        if (check_values) {
          check_multipliers(node.multiplier, 1, node.shift, static_cast<std::size_t>(first.channels), name, who);
          check_multipliers(node.negative_multiplier, 0, node.shift, static_cast<std::size_t>(first.channels), name,
                            who);
        }
        out = {first.channels, Kind::activation};
        break;
      case IntegerOp::concat: {
        std::int64_t channels = 0;
        Kind kind = first.kind;
        for (std::int32_t input : node.inputs) {
          const TensorInfo& t = tensors[static_cast<std::size_t>(input)];
          if (t.accumulator() != first.accumulator()) fail(who, name + " joins activations and accumulators");
          if (t.kind != kind) kind = Kind::accumulator;
          channels += t.channels;
        }
        if (channels > kMaxChannels) fail(who, name + " gives " + std::to_string(channels) + " channels");
        out = {static_cast<std::int32_t>(channels), kind};
        break;
      }
      case IntegerOp::slice:
        if (node.begin < 0 || node.count < 1 || std::int64_t(node.begin) + node.count > first.channels)
          fail(who, name + " takes channels [" + std::to_string(node.begin) + ", " +
                        std::to_string(std::int64_t(node.begin) + node.count) + ") of " +
                        std::to_string(first.channels));
        out = {node.count, first.kind};
        break;
      case IntegerOp::input:
        if (node.count < 1 || node.count > kMaxChannels)
          fail(who, name + " has " + std::to_string(node.count) + " channels");
        out = {node.count, Kind::fixed_point};
        break;
      case IntegerOp::tanh:
        if (!first.accumulator()) fail(who, name + " reads activations; a tanh reads an accumulator");
        if (check_values) {
          check_multipliers(node.multiplier, 1, node.shift, static_cast<std::size_t>(first.channels), name, who);
          if (node.table.size() < 2 || node.table.size() > static_cast<std::size_t>(kMaxTanhTable))
            fail(who, name + " has a table of " + std::to_string(node.table.size()) + " entries (2.." +
                          std::to_string(kMaxTanhTable) + " expected)");
          for (std::int64_t v : node.table)
            if (v < -kFixedPointMax || v > kFixedPointMax)
              fail(who, name + " has a table entry " + std::to_string(v) + " outside +-2^31");
        }
        out = {first.channels, Kind::fixed_point};
        break;
      case IntegerOp::checkerboard_mask:
        if (node.parity != 0 && node.parity != 1)
          fail(who, name + " keeps the positions of parity " + std::to_string(node.parity) + " (0 or 1 expected)");
        out = first;
        break;
      case IntegerOp::add: {
        const TensorInfo& second = tensors[static_cast<std::size_t>(node.inputs[1])];
        if (first.kind != Kind::fixed_point || second.kind != Kind::fixed_point || first.channels != second.channels)
          fail(who, name + " adds " + kind_name(first.kind) + " to " + kind_name(second.kind) + " (" +
                        std::to_string(first.channels) + " and " + std::to_string(second.channels) +
                        " channels); it adds fixed-point values of equal channels");
        out = {first.channels, Kind::fixed_point};
        break;
      }
      default:
        fail(who, "node " + std::to_string(n) + " has the unknown operation " +
                      std::to_string(static_cast<std::int32_t>(node.op)));
    }
    tensors.push_back(out);
  }
  return tensors;
}

}  // namespace

const char* integer_op_name(IntegerOp op) {
  switch (op) {
    case IntegerOp::convolution:
      return "convolution";
    case IntegerOp::rescale:
      return "rescale";
    case IntegerOp::concat:
      return "concat";
    case IntegerOp::slice:
      return "slice";
    case IntegerOp::input:
      return "input";
    case IntegerOp::tanh:
      return "tanh";
    case IntegerOp::add:
      return "add";
    case IntegerOp::checkerboard_mask:
      return "checkerboard mask";
  }
  return "unknown";
}

std::int64_t IntegerConvLayer::output_side(std::int64_t input_side) const {
  return conv_output_side(*this, input_side);
}

std::vector<std::int32_t> IntegerNetwork::channels() const {
  std::vector<std::int32_t> result;
  // The structure only: the values were checked once, by check_network.
  for (const TensorInfo& t : describe(*this, "IntegerNetwork::channels", false)) result.push_back(t.channels);
  return result;
}

std::vector<std::int32_t> IntegerNetwork::groups() const {
  std::vector<std::int32_t> result;
  for (const IntegerNode& node : nodes)
    if (node.op == IntegerOp::input) result.push_back(node.count);
  if (result.empty()) result.push_back(out_channels());
  return result;
}

Shape IntegerNetwork::output_shape(std::int64_t height, std::int64_t width) const {
  const auto [h, w] = tensor_sides(*this, height, width)[static_cast<std::size_t>(scales)];
  return {out_channels(), h, w};
}

std::vector<Side> tensor_sides(const IntegerNetwork& network, std::int64_t height, std::int64_t width) {
  return network_sides(network, height, width);
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
  std::int64_t grouped = 0, inputs = 0;
  for (const IntegerNode& node : network.nodes)
    if (node.op == IntegerOp::input) grouped += node.count, ++inputs;
  if (inputs > 0) {
    if (grouped != channels)
      fail(who, "its input nodes take " + std::to_string(grouped) + " latent channels, the scales have " +
                    std::to_string(channels));
    if (network.decoded < 0 || network.decoded >= count ||
        tensors[static_cast<std::size_t>(network.decoded)].kind != Kind::fixed_point ||
        tensors[static_cast<std::size_t>(network.decoded)].channels != channels)
      fail(who, "the decoded latent must be a tensor of fixed-point values with the scales' " +
                    std::to_string(channels) + " channels");
    if (!network.has_means()) fail(who, "latent groups (input nodes) need means");
  } else if (network.decoded != -1) {
    fail(who, "a decoded latent without input nodes");
  }
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

IntegerNetworkRunner::IntegerNetworkRunner(IntegerNetwork network, Device device) : network_(std::move(network)) {
  if (network_.nodes.empty()) throw ConfigError("integer network: the network has no nodes");
  groups_ = network_.groups();
  backend_ = device.is_cuda() ? make_cuda_backend(network_, device.index) : make_cpu_backend(network_);
}

struct IntegerNetworkRunner::State {
  std::vector<Side> sides;
  std::vector<std::int32_t> channels;
  std::vector<bool> ready;
  std::vector<std::int32_t> input_tensors;  // of group k
};

IntegerNetworkRunner::~IntegerNetworkRunner() = default;

void IntegerNetworkRunner::start(const std::vector<std::int32_t>& input, std::int64_t height, std::int64_t width) {
  if (height < 1 || width < 1 || static_cast<std::int64_t>(input.size()) != network_.in_channels * height * width)
    throw ShapeError("integer network: an input of " + std::to_string(input.size()) + " values for [" +
                     std::to_string(network_.in_channels) + ", " + std::to_string(height) + ", " +
                     std::to_string(width) + "]");
  state_ = std::make_unique<State>();
  state_->sides = tensor_sides(network_, height, width);
  if (network_.has_means() && state_->sides[static_cast<std::size_t>(network_.means)] !=
                                  state_->sides[static_cast<std::size_t>(network_.scales)])
    throw ShapeError("integer network: the means and the scales have different sizes");
  state_->channels = network_.channels();
  state_->ready.assign(state_->sides.size(), false);
  state_->input_tensors = input_tensors(network_);
  backend_->reset(state_->sides);
  std::vector<std::int64_t> q(input.size());
  for (std::size_t n = 0; n < input.size(); ++n)
    q[n] = std::clamp<std::int64_t>(input[n], -kIntegerActivationMax, kIntegerActivationMax);
  backend_->set(0, q);
  state_->ready[0] = true;
}

void IntegerNetworkRunner::set_input(std::int32_t group, const std::vector<std::int64_t>& values) {
  if (!state_) throw ConfigError("integer network: set_input before start");
  if (group < 0 || static_cast<std::size_t>(group) >= state_->input_tensors.size())
    throw ConfigError("integer network: no input for latent group " + std::to_string(group));
  const std::int32_t tensor = state_->input_tensors[static_cast<std::size_t>(group)];
  const Side side = state_->sides[static_cast<std::size_t>(tensor)];
  const std::int64_t expected = std::int64_t(groups_[static_cast<std::size_t>(group)]) * side.first * side.second;
  if (static_cast<std::int64_t>(values.size()) != expected)
    throw ShapeError("integer network: latent group " + std::to_string(group) + " given " +
                     std::to_string(values.size()) + " values, expected " + std::to_string(expected));
  std::vector<std::int64_t> clamped(values.size());
  for (std::size_t n = 0; n < values.size(); ++n) clamped[n] = arithmetic::clamp_fixed(values[n]);
  backend_->set(tensor, clamped);
  forget_dependents(network_, tensor, state_->ready);
  state_->ready[static_cast<std::size_t>(tensor)] = true;
}

void IntegerNetworkRunner::compute(std::int32_t tensor) {
  if (state_->ready[static_cast<std::size_t>(tensor)]) return;
  const IntegerNode& node = network_.nodes[static_cast<std::size_t>(tensor - 1)];
  if (node.op == IntegerOp::input) {
    const auto k =
        std::find(state_->input_tensors.begin(), state_->input_tensors.end(), tensor) - state_->input_tensors.begin();
    throw ConfigError("integer network: tensor " + std::to_string(tensor) + " needs latent group " + std::to_string(k) +
                      ", which is not decoded yet");
  }
  for (std::int32_t input : node.inputs) compute(input);
  backend_->compute(tensor);
  state_->ready[static_cast<std::size_t>(tensor)] = true;
}

IntegerOutputs IntegerNetworkRunner::outputs(std::int32_t group) {
  if (!state_) throw ConfigError("integer network: outputs before start");
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size())
    throw ConfigError("integer network: no latent group " + std::to_string(group));
  std::int32_t begin = 0;
  for (std::int32_t k = 0; k < group; ++k) begin += groups_[static_cast<std::size_t>(k)];
  const std::int32_t count = groups_[static_cast<std::size_t>(group)];
  const Side side = state_->sides[static_cast<std::size_t>(network_.scales)];
  const std::int64_t plane = side.first * side.second;
  const ChannelRange scales = resolve_range(network_, state_->channels, state_->ready, {network_.scales, begin, count});
  compute(scales.tensor);
  ChannelRange means{-1, 0, 0};
  if (network_.has_means()) {
    means = resolve_range(network_, state_->channels, state_->ready, {network_.means, begin, count});
    compute(means.tensor);
  }
  IntegerOutputs out = backend_->outputs(scales.tensor, scales.begin * plane, means.tensor, means.begin * plane,
                                         count * plane, begin, plane);
  out.shape = {count, side.first, side.second};
  return out;
}

std::vector<std::int64_t> IntegerNetworkRunner::values(std::int32_t tensor, std::int32_t begin, std::int32_t count) {
  if (!state_) throw ConfigError("integer network: values before start");
  if (tensor < 0 || tensor >= network_.tensors() || begin < 0 || count < 0 ||
      begin + count > state_->channels[static_cast<std::size_t>(tensor)])
    throw ConfigError("integer network: no channels [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") of tensor " + std::to_string(tensor));
  const Side side = state_->sides[static_cast<std::size_t>(tensor)];
  const std::int64_t plane = side.first * side.second;
  const ChannelRange range = resolve_range(network_, state_->channels, state_->ready, {tensor, begin, count});
  compute(range.tensor);
  return backend_->read(range.tensor, range.begin * plane, count * plane);
}

IntegerOutputs run_network(const IntegerNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                           std::int64_t width, Device device) {
  IntegerNetworkRunner runner(network, device);
  if (runner.groups().size() != 1 || network.decoded >= 0)
    throw ConfigError("integer network: run_network needs a network without latent groups");
  runner.start(input, height, width);
  return runner.outputs(0);
}

std::vector<std::int64_t> tensor_values(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t height, std::int64_t width, std::int32_t tensor) {
  IntegerNetworkRunner runner(network, Device::cpu());
  runner.start(input, height, width);
  if (tensor < 0 || tensor >= network.tensors())
    throw ConfigError("integer network: no tensor " + std::to_string(tensor));
  return runner.values(tensor, 0, network.channels()[static_cast<std::size_t>(tensor)]);
}

}  // namespace plexus::codec

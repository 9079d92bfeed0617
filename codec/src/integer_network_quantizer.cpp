#include "plexus/codec/integer_network_quantizer.h"

#include <algorithm>
#include <cmath>

#include "cpu_convolution.h"
#include "network_structure.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

void check_conv(const FloatConvLayer& layer, const std::string& name) {
  const std::size_t weights =
      static_cast<std::size_t>(layer.in_channels) * layer.out_channels * layer.kernel * layer.kernel;
  if (layer.in_channels < 1 || layer.out_channels < 1 || layer.kernel < 1 || layer.stride < 1 ||
      layer.weight.size() != weights || layer.bias.size() != static_cast<std::size_t>(layer.out_channels))
    throw ConfigError(name + ": " + std::to_string(layer.weight.size()) + " weights and " +
                      std::to_string(layer.bias.size()) + " biases do not fit its shape");
  const auto finite = [](auto v) { return std::isfinite(v); };
  if (!std::all_of(layer.weight.begin(), layer.weight.end(), finite) ||
      !std::all_of(layer.bias.begin(), layer.bias.end(), finite))
    throw ConfigError(name + " has a weight or bias that is not finite");
}

// The channels of every tensor; ConfigError when the nodes do not fit together.
std::vector<std::int32_t> tensor_channels(const FloatNetwork& network) {
  if (network.nodes.empty() || network.in_channels < 1) throw ConfigError("integer network: no nodes to quantise");
  std::vector<std::int32_t> channels{network.in_channels};
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const FloatNode& node = network.nodes[n];
    const std::string name = "integer network: node " + std::to_string(n) + " (" + integer_op_name(node.op) + ")";
    const std::size_t inputs = node.op == IntegerOp::input ? 0 : node.op == IntegerOp::add ? 2 : 1;
    if (node.op == IntegerOp::concat ? node.inputs.empty() : node.inputs.size() != inputs)
      throw ConfigError(name + " has " + std::to_string(node.inputs.size()) + " inputs");
    for (std::int32_t input : node.inputs)
      if (input < 0 || input > static_cast<std::int32_t>(n))
        throw ConfigError(name + " reads tensor " + std::to_string(input) + ", not computed before it");
    const std::int32_t first = node.inputs.empty() ? node.count : channels[static_cast<std::size_t>(node.inputs[0])];
    std::int32_t out = first;
    if (node.op == IntegerOp::convolution) {
      check_conv(node.conv, name);
      if (node.conv.in_channels != first)
        throw ConfigError(name + " reads " + std::to_string(node.conv.in_channels) + " channels, its input has " +
                          std::to_string(first));
      out = node.conv.out_channels;
    } else if (node.op == IntegerOp::rescale) {
      if (!(node.negative_slope >= 0 && node.negative_slope <= 1))
        throw ConfigError(name + " has a negative slope of " + std::to_string(node.negative_slope) +
                          " (0..1 have an integer form)");
    } else if (node.op == IntegerOp::concat) {
      out = 0;
      for (std::int32_t input : node.inputs) out += channels[static_cast<std::size_t>(input)];
    } else if (node.op == IntegerOp::slice) {
      if (node.begin < 0 || node.count < 1 || node.begin + node.count > first)
        throw ConfigError(name + " takes channels outside its input's " + std::to_string(first));
      out = node.count;
    } else if (node.op == IntegerOp::input) {
      if (node.count < 1) throw ConfigError(name + " has no channels");
    } else if (node.op == IntegerOp::tanh) {
      if (!std::isfinite(node.scale)) throw ConfigError(name + " has a scale that is not finite");
    } else if (node.op == IntegerOp::checkerboard_mask) {
      if (node.parity != 0 && node.parity != 1) throw ConfigError(name + " keeps a parity other than 0 or 1");
    } else if (node.op == IntegerOp::add) {
      if (channels[static_cast<std::size_t>(node.inputs[1])] != first)
        throw ConfigError(name + " adds tensors of different channels");
    } else {
      throw ConfigError(name + " has an unknown operation");
    }
    channels.push_back(out);
  }
  const std::int32_t tensors = static_cast<std::int32_t>(channels.size());
  if (network.scales < 0 || network.scales >= tensors || network.means < -1 || network.means >= tensors)
    throw ConfigError("integer network: the scales or the means are read from a tensor it does not have");
  if (network.means >= 0 &&
      channels[static_cast<std::size_t>(network.means)] != channels[static_cast<std::size_t>(network.scales)])
    throw ConfigError("integer network: the means and the scales have different channels");
  return channels;
}

const double kFixedPointStep = std::ldexp(1.0, -kMeanFractionBits);

// T[i] = nearbyint(2^16 scale t[i]) of the stored t[i] = tanh(i / 2^10):
// two correctly rounded operations, the same integers everywhere.
std::vector<std::int64_t> tanh_table(const std::vector<double>& unit, double scale) {
  if (unit.size() < 2 || unit.size() > static_cast<std::size_t>(kMaxTanhTable))
    throw ConfigError("integer network: a tanh node needs a stored tanh table of 2.." + std::to_string(kMaxTanhTable) +
                      " entries, there are " + std::to_string(unit.size()));
  std::vector<std::int64_t> table;
  for (double t : unit) {
    const double v = std::nearbyint(std::ldexp(scale * t, kMeanFractionBits));
    if (!(std::abs(v) <= double(kFixedPointMax)))
      throw ConfigError("integer network: a tanh scale of " + std::to_string(scale) + " leaves +-2^15");
    table.push_back(static_cast<std::int64_t>(v));
  }
  return table;
}

// The calibrated steps a_l[c] of the input of hidden layer l + 1.
std::vector<double> activation_steps(const std::vector<double>& maxima, double headroom) {
  double layer_max = 0;
  for (double m : maxima) layer_max = std::max(layer_max, m);
  if (!(layer_max > 0)) layer_max = 1;
  std::vector<double> steps(maxima.size());
  for (std::size_t c = 0; c < maxima.size(); ++c)
    steps[c] = headroom * (maxima[c] > 0 ? maxima[c] : layer_max) / kIntegerActivationMax;
  return steps;
}

// M, S with M / 2^S ~ ratio: M in [2^15, 2^16) when S fits [0, 62].
void rescale_for(double ratio, std::int64_t& multiplier, std::int32_t& shift) {
  int exponent = 0;
  std::frexp(ratio, &exponent);  // ratio = f 2^exponent, f in [0.5, 1)
  shift = std::clamp(16 - exponent, 0, 62);
  double m = std::nearbyint(std::ldexp(ratio, shift));
  if (m >= static_cast<double>(kIntegerMultiplierLimit) && shift > 0) m = std::nearbyint(std::ldexp(ratio, --shift));
  multiplier = static_cast<std::int64_t>(std::clamp(m, 1.0, static_cast<double>(kIntegerMultiplierLimit - 1)));
}

// A convolution reading inputs of steps `in_steps`; `out_steps` receives w[o].
IntegerConvLayer quantize_conv(const FloatConvLayer& f, const std::vector<double>& in_steps,
                               std::vector<double>& out_steps) {
  IntegerConvLayer layer;
  layer.transposed = f.transposed;
  layer.in_channels = f.in_channels;
  layer.out_channels = f.out_channels;
  layer.kernel = f.kernel;
  layer.stride = f.stride;
  layer.padding = f.padding;
  layer.output_padding = f.output_padding;
  const std::int64_t k2 = std::int64_t(f.kernel) * f.kernel;
  // The weights are [O, C, k, k], or [C, O, k, k] transposed: rows of k^2
  // taps, `inner` rows per `outer` index. fn(n, c, o) visits the taps of
  // outer index i, n their position, c their input channel, o their output.
  const bool by_input = f.transposed;
  const std::int64_t outer = by_input ? f.in_channels : f.out_channels;
  const std::int64_t inner = by_input ? f.out_channels : f.in_channels;
  auto for_taps_of = [&](std::int64_t i, auto&& fn) {
    std::size_t n = static_cast<std::size_t>(i * inner * k2);
    for (std::int64_t j = 0; j < inner; ++j)
      for (std::int64_t t = 0; t < k2; ++t, ++n) fn(n, by_input ? i : j, by_input ? j : i);
  };
  std::vector<double> largest(static_cast<std::size_t>(f.out_channels), 0.0);
  for (std::int64_t i = 0; i < outer; ++i)
    for_taps_of(i, [&](std::size_t n, std::int64_t c, std::int64_t o) {
      double& m = largest[o];
      m = std::max(m, std::abs(f.weight[n] * in_steps[c]));
    });
  out_steps.assign(static_cast<std::size_t>(f.out_channels), 1.0);
  for (std::int64_t o = 0; o < f.out_channels; ++o) {
    const double step = std::max(largest[o] / kIntegerWeightMax, std::abs(f.bias[o]) / std::ldexp(1.0, 45));
    out_steps[o] = step > 0 ? step : 1.0;
    layer.bias.push_back(static_cast<std::int64_t>(std::nearbyint(f.bias[o] / out_steps[o])));
  }
  // Each weight on its own, so the threads' split does not change a bit.
  layer.weight.resize(f.weight.size());
  parallel_for(outer, [&](std::int64_t i) {
    for_taps_of(i, [&](std::size_t n, std::int64_t c, std::int64_t o) {
      layer.weight[n] = static_cast<std::int32_t>(std::clamp(std::nearbyint(f.weight[n] * in_steps[c] / out_steps[o]),
                                                             -double(kIntegerWeightMax), double(kIntegerWeightMax)));
    });
  });
  return layer;
}

}  // namespace

std::int32_t FloatNetwork::rescales() const {
  return static_cast<std::int32_t>(
      std::count_if(nodes.begin(), nodes.end(), [](const FloatNode& n) { return n.op == IntegerOp::rescale; }));
}

std::vector<std::int32_t> FloatNetwork::channels() const { return tensor_channels(*this); }

std::vector<std::int32_t> FloatNetwork::groups() const {
  std::vector<std::int32_t> result;
  for (const FloatNode& node : nodes)
    if (node.op == IntegerOp::input) result.push_back(node.count);
  if (result.empty()) result.push_back(channels()[static_cast<std::size_t>(scales)]);
  return result;
}

FloatEvaluation::FloatEvaluation(const FloatNetwork& network, const std::vector<std::int32_t>& input,
                                 std::int64_t height, std::int64_t width, ActivationRanges* ranges)
    : network_(network), ranges_(ranges) {
  channels_ = tensor_channels(network);
  groups_ = network.groups();
  inputs_ = input_tensors(network);
  if (height < 1 || width < 1 || static_cast<std::int64_t>(input.size()) != network.in_channels * height * width)
    throw ShapeError("float network: " + std::to_string(input.size()) + " input values for [" +
                     std::to_string(network.in_channels) + ", " + std::to_string(height) + ", " +
                     std::to_string(width) + "]");
  sides_ = network_sides(network, height, width);
  if (ranges && ranges->maxima.empty())
    for (const FloatNode& node : network.nodes)
      if (node.op == IntegerOp::rescale)
        ranges->maxima.emplace_back(channels_[static_cast<std::size_t>(node.inputs[0])], 0.0);
  if (ranges && static_cast<std::int32_t>(ranges->maxima.size()) != network.rescales())
    throw ConfigError("float network: activation ranges for " + std::to_string(ranges->maxima.size()) +
                      " rescale nodes, the network has " + std::to_string(network.rescales()));
  std::int32_t rescales = 0;
  for (const FloatNode& node : network.nodes)
    rescale_number_.push_back(node.op == IntegerOp::rescale ? rescales++ : -1);
  values_.resize(sides_.size());
  ready_.assign(sides_.size(), false);
  values_[0].assign(input.begin(), input.end());
  for (double& v : values_[0]) v = std::clamp(v, -double(kIntegerActivationMax), double(kIntegerActivationMax));
  ready_[0] = true;
  if (ranges) ++ranges->samples;
}

FloatEvaluation::~FloatEvaluation() = default;

void FloatEvaluation::set_input(std::int32_t group, std::vector<double> values) {
  if (group < 0 || static_cast<std::size_t>(group) >= inputs_.size())
    throw ConfigError("float network: no input for latent group " + std::to_string(group));
  const std::size_t t = static_cast<std::size_t>(inputs_[static_cast<std::size_t>(group)]);
  if (static_cast<std::int64_t>(values.size()) != channels_[t] * sides_[t].first * sides_[t].second)
    throw ShapeError("float network: latent group " + std::to_string(group) + " given " +
                     std::to_string(values.size()) + " values");
  const double limit = std::ldexp(double(kFixedPointMax), -kMeanFractionBits);
  for (double& v : values) v = std::clamp(v, -limit, limit);
  values_[t] = std::move(values);
  forget_dependents(network_, static_cast<std::int32_t>(t), ready_);
  ready_[t] = true;
}

const std::vector<double>& FloatEvaluation::compute(std::int32_t tensor) {
  const std::size_t t = static_cast<std::size_t>(tensor);
  if (ready_[t]) return values_[t];
  const FloatNode& node = network_.nodes[t - 1];
  if (node.op == IntegerOp::input)
    throw ConfigError("float network: tensor " + std::to_string(tensor) + " needs a latent group not given yet");
  for (std::int32_t input : node.inputs) compute(input);
  const std::int64_t plane = sides_[t].first * sides_[t].second;
  auto input = [&](std::size_t k) -> const std::vector<double>& {
    return values_[static_cast<std::size_t>(node.inputs[k])];
  };
  std::vector<double> y;
  switch (node.op) {
    case IntegerOp::convolution: {
      const auto [h, w] = sides_[static_cast<std::size_t>(node.inputs[0])];
      // In f64, as the integer network's convolutions (calibration only: not exact).
      y = cpu_convolution<double>(node.conv, weight_rows(node.conv), input(0), {h, w}, sides_[t]);
      break;
    }
    case IntegerOp::rescale: {
      y = input(0);
      std::vector<double>* seen =
          ranges_ ? &ranges_->maxima[static_cast<std::size_t>(rescale_number_[t - 1])] : nullptr;
      for (std::size_t n = 0; n < y.size(); ++n) {
        if (y[n] <= 0) y[n] *= node.negative_slope;
        if (seen) {
          double& m = (*seen)[n / static_cast<std::size_t>(plane)];
          m = std::max(m, std::abs(y[n]));
        }
      }
      break;
    }
    case IntegerOp::tanh:
      y = input(0);
      for (double& v : y) v = node.scale * std::tanh(v);
      break;
    case IntegerOp::add:
      y = input(0);
      for (std::size_t n = 0; n < y.size(); ++n) y[n] += input(1)[n];
      break;
    case IntegerOp::checkerboard_mask:
      y = input(0);
      for (std::size_t n = 0; n < y.size(); ++n) {
        const std::int64_t position = static_cast<std::int64_t>(n) % plane;
        if (!arithmetic::checkerboard_kept(position / sides_[t].second, position % sides_[t].second, node.parity))
          y[n] = 0;
      }
      break;
    case IntegerOp::concat:
      for (std::size_t k = 0; k < node.inputs.size(); ++k) y.insert(y.end(), input(k).begin(), input(k).end());
      break;
    case IntegerOp::slice:
      y.assign(input(0).begin() + node.begin * plane, input(0).begin() + (node.begin + node.count) * plane);
      break;
    case IntegerOp::input:
      break;
  }
  values_[t] = std::move(y);
  ready_[t] = true;
  return values_[t];
}

std::vector<double> FloatEvaluation::values(std::int32_t tensor, std::int32_t begin, std::int32_t count) {
  if (tensor < 0 || static_cast<std::size_t>(tensor) >= sides_.size() || begin < 0 || count < 0 ||
      begin + count > channels_[static_cast<std::size_t>(tensor)])
    throw ConfigError("float network: no channels [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") of tensor " + std::to_string(tensor));
  const ChannelRange range = resolve_range(network_, channels_, ready_, {tensor, begin, count});
  const std::vector<double>& all = compute(range.tensor);
  const std::int64_t plane =
      sides_[static_cast<std::size_t>(tensor)].first * sides_[static_cast<std::size_t>(tensor)].second;
  return {all.begin() + range.begin * plane, all.begin() + (range.begin + count) * plane};
}

FloatOutputs FloatEvaluation::outputs(std::int32_t group) {
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size())
    throw ConfigError("float network: no latent group " + std::to_string(group));
  std::int32_t begin = 0;
  for (std::int32_t k = 0; k < group; ++k) begin += groups_[static_cast<std::size_t>(k)];
  const std::int32_t count = groups_[static_cast<std::size_t>(group)];
  FloatOutputs out;
  out.scales = values(network_.scales, begin, count);
  if (network_.means >= 0) out.means = values(network_.means, begin, count);
  return out;
}

FloatOutputs float_forward(const FloatNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                           std::int64_t width, ActivationRanges* ranges) {
  FloatEvaluation evaluation(network, input, height, width, ranges);
  if (evaluation.groups().size() != 1 || network.decoded >= 0)
    throw ConfigError("float network: float_forward needs a network without latent groups");
  return evaluation.outputs(0);
}

IntegerNetwork quantize_network(FloatNetwork network, const ActivationRanges& ranges,
                                const std::vector<double>& scale_table, double headroom,
                                std::vector<std::vector<double>>* steps_out) {
  const std::vector<std::int32_t> channels = tensor_channels(network);
  if (static_cast<std::int32_t>(ranges.maxima.size()) != network.rescales())
    throw ConfigError("integer network: activation ranges for " + std::to_string(ranges.maxima.size()) +
                      " rescale nodes, but the network has " + std::to_string(network.rescales()));
  if (!(headroom >= 1) || !std::isfinite(headroom))
    throw ConfigError("integer network: the activation headroom must be a finite value >= 1");
  if (scale_table.size() < 2 || scale_table.size() > 1024)
    throw ConfigError("integer network: a scale table of " + std::to_string(scale_table.size()) +
                      " levels (2..1024 expected)");
  for (std::size_t i = 0; i < scale_table.size(); ++i)
    if (!(scale_table[i] > 0) || !std::isfinite(scale_table[i]) || (i > 0 && !(scale_table[i] > scale_table[i - 1])))
      throw ConfigError("integer network: the scale table must be positive and increasing");

  IntegerNetwork result;
  result.in_channels = network.in_channels;
  result.levels = static_cast<std::int32_t>(scale_table.size());
  result.scales = network.scales;
  result.means = network.means;
  result.decoded = network.decoded;
  std::vector<std::vector<double>> steps{std::vector<double>(static_cast<std::size_t>(network.in_channels), 1.0)};
  std::size_t rescale = 0;
  for (FloatNode& f : network.nodes) {
    IntegerNode node;
    node.op = f.op;
    node.inputs = f.inputs;
    static const std::vector<double> kNone;
    const std::vector<double>& in_steps = f.inputs.empty() ? kNone : steps[static_cast<std::size_t>(f.inputs[0])];
    std::vector<double> out_steps;
    if (f.op == IntegerOp::convolution) {
      node.conv = quantize_conv(f.conv, in_steps, out_steps);
      std::vector<float>().swap(f.conv.weight);
    } else if (f.op == IntegerOp::rescale) {
      const std::vector<double>& maxima = ranges.maxima[rescale++];
      if (maxima.size() != in_steps.size())
        throw ConfigError("integer network: activation ranges of rescale node " + std::to_string(rescale - 1) +
                          " have " + std::to_string(maxima.size()) + " channels, the node has " +
                          std::to_string(in_steps.size()));
      out_steps = activation_steps(maxima, headroom);
      node.multiplier.resize(out_steps.size());
      node.negative_multiplier.resize(out_steps.size());
      node.shift.resize(out_steps.size());
      for (std::size_t c = 0; c < out_steps.size(); ++c) {
        const double ratio = in_steps[c] / out_steps[c];
        rescale_for(ratio, node.multiplier[c], node.shift[c]);
        node.negative_multiplier[c] = f.negative_slope == 1
                                          ? node.multiplier[c]
                                          : static_cast<std::int64_t>(std::clamp(
                                                std::nearbyint(std::ldexp(f.negative_slope * ratio, node.shift[c])),
                                                0.0, static_cast<double>(kIntegerMultiplierLimit - 1)));
      }
    } else if (f.op == IntegerOp::concat) {
      for (std::int32_t input : f.inputs) {
        const std::vector<double>& part = steps[static_cast<std::size_t>(input)];
        out_steps.insert(out_steps.end(), part.begin(), part.end());
      }
    } else if (f.op == IntegerOp::checkerboard_mask) {
      node.parity = f.parity;
      out_steps = in_steps;
    } else if (f.op == IntegerOp::slice) {
      node.begin = f.begin;
      node.count = f.count;
      out_steps.assign(in_steps.begin() + f.begin, in_steps.begin() + f.begin + f.count);
    } else if (f.op == IntegerOp::input) {
      node.count = f.count;
      out_steps.assign(static_cast<std::size_t>(f.count), kFixedPointStep);
    } else if (f.op == IntegerOp::tanh) {
      node.table = tanh_table(network.tanh_table, f.scale);
      node.multiplier.resize(in_steps.size());
      node.shift.resize(in_steps.size());
      for (std::size_t c = 0; c < in_steps.size(); ++c)
        rescale_for(std::ldexp(in_steps[c], kTanhTableBits), node.multiplier[c], node.shift[c]);
      out_steps.assign(in_steps.size(), kFixedPointStep);
    } else {  // add
      for (std::int32_t input : f.inputs)
        for (double step : steps[static_cast<std::size_t>(input)])
          if (step != kFixedPointStep)
            throw ConfigError("integer network: an add node reads a tensor that is not fixed point (step 2^-16)");
      out_steps.assign(in_steps.size(), kFixedPointStep);
    }
    result.nodes.push_back(std::move(node));
    steps.push_back(std::move(out_steps));
  }
  const double limit = std::ldexp(1.0, 62);
  for (double u : steps[static_cast<std::size_t>(network.scales)])
    for (std::size_t i = 0; i + 1 < scale_table.size(); ++i)
      result.thresholds.push_back(static_cast<std::int64_t>(std::clamp(std::floor(scale_table[i] / u), -limit, limit)));
  if (network.means >= 0)
    for (double u : steps[static_cast<std::size_t>(network.means)]) {
      const double ratio = std::ldexp(u, kMeanFractionBits);
      if (!(ratio < 0.5 * static_cast<double>(kIntegerMultiplierLimit)))
        throw ConfigError("integer network: a mean step of " + std::to_string(u) +
                          " is too coarse for means in units of 2^-16");
      result.mean_multiplier.emplace_back();
      result.mean_shift.emplace_back();
      rescale_for(ratio, result.mean_multiplier.back(), result.mean_shift.back());
    }
  if (steps_out) *steps_out = steps;
  check_network(result, "quantize_network");
  return result;
}

}  // namespace plexus::codec

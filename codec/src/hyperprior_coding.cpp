#include "hyperprior_coding.h"

#include <cmath>
#include <random>

#include "plexus/error.h"

namespace plexus::ae {

namespace {

constexpr const char* kTransposed = "ConvTranspose2d";
constexpr const char* kConvolution = "Conv2d";
constexpr const char* kRelu = "ReLU";

const Tensor& tensor(const TensorFile& file, const std::string& name, const std::string& who) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw IoError(who + ": tensor '" + name + "' is missing");
  return it->second;
}

Shape weight_shape(const codec::FloatConvLayer& l) {
  return l.transposed ? Shape{l.in_channels, l.out_channels, l.kernel, l.kernel}
                      : Shape{l.out_channels, l.in_channels, l.kernel, l.kernel};
}

// The rule h_s breaks, followed by how it breaks it.
std::string chain_rule_broken(const std::string& problem) {
  return std::string("the hyper-synthesis (the nodes from the hyper-latent to the scales) must be a chain of ") +
         kTransposed + " or " + kConvolution + " layers with a ReLU between each two; " + problem;
}

bool is_convolution(const NodeSpec& node) { return node.type == kTransposed || node.type == kConvolution; }

}  // namespace

std::optional<std::string> hyper_synthesis_problem(const std::vector<NodeSpec>& nodes) {
  std::string previous_output;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    const NodeSpec& node = nodes[n];
    if (node.inputs.size() != 1 || node.outputs.size() != 1)
      return chain_rule_broken("node '" + node.name + "' has " + std::to_string(node.inputs.size()) + " inputs and " +
                               std::to_string(node.outputs.size()) + " outputs");
    if (n > 0 && node.inputs[0] != previous_output)
      return chain_rule_broken("node '" + node.name + "' does not read the previous node");
    previous_output = node.outputs[0];
    const bool conv = is_convolution(node);
    const bool expect_conv = n % 2 == 0;
    if (conv != expect_conv || (!conv && node.type != kRelu))
      return chain_rule_broken("node '" + node.name + "' is a " + node.type + " where a " +
                               (expect_conv ? "convolution" : "ReLU") + " belongs");
  }
  if (nodes.empty()) return chain_rule_broken("it has no convolution");
  return std::nullopt;
}

std::vector<codec::FloatConvLayer> float_hyper_synthesis(const std::vector<NodeSpec>& nodes, const TensorFile& file,
                                                         const std::string& who) {
  if (const auto problem = hyper_synthesis_problem(nodes)) throw ConfigError(who + ": " + *problem);
  std::vector<codec::FloatConvLayer> layers;
  for (const NodeSpec& node : nodes) {
    if (!is_convolution(node)) continue;
    codec::FloatConvLayer layer;
    layer.transposed = node.type == kTransposed;
    const Tensor& weight = tensor(file, node.name + ".weight", who);
    if (weight.ndim() != 4) throw IoError(who + ": tensor '" + node.name + ".weight' is " + shape_str(weight.shape()));
    layer.kernel = static_cast<std::int32_t>(node.params.value("kernel", 1));
    layer.stride = static_cast<std::int32_t>(node.params.value("stride", 1));
    layer.padding = static_cast<std::int32_t>(node.params.value("padding", 0));
    layer.output_padding = static_cast<std::int32_t>(node.params.value("output_padding", 0));
    layer.out_channels = static_cast<std::int32_t>(node.params.value("out_channels", 0));
    layer.in_channels = static_cast<std::int32_t>(weight.dim(layer.transposed ? 0 : 1));
    if (weight.shape() != weight_shape(layer))
      throw IoError(who + ": tensor '" + node.name + ".weight' is " + shape_str(weight.shape()) + ", expected " +
                    shape_str(weight_shape(layer)));
    layer.weight = weight.to_values();
    if (node.params.value("bias", true)) {
      const Tensor& bias = tensor(file, node.name + ".bias", who);
      if (bias.shape() != Shape{layer.out_channels})
        throw IoError(who + ": tensor '" + node.name + ".bias' is " + shape_str(bias.shape()));
      layer.bias = bias.to_values();
    } else {
      layer.bias.assign(static_cast<std::size_t>(layer.out_channels), 0.0);
    }
    if (!layers.empty() && layers.back().out_channels != layer.in_channels)
      throw ConfigError(who + ": " +
                        chain_rule_broken("node '" + node.name + "' reads " + std::to_string(layer.in_channels) +
                                          " channels"));
    layers.push_back(std::move(layer));
  }
  return layers;
}

std::string integer_network_prefix(const std::string& gaussian_node) { return gaussian_node + ".coding."; }

bool has_calibration(const TensorFile& file, const std::string& prefix) {
  return file.tensors.count(prefix + "scale_table") > 0;
}

void store_calibration(const HyperSynthesisCalibration& calibration, const std::string& prefix, TensorFile& file) {
  const std::int64_t levels = static_cast<std::int64_t>(calibration.scale_table.size());
  file.tensors[prefix + "scale_table"] = Tensor::from_values(calibration.scale_table, {levels}, DType::f64);
  file.tensors[prefix + "activation_headroom"] = Tensor::from_values({calibration.headroom}, {1}, DType::f64);
  for (std::size_t l = 0; l < calibration.ranges.maxima.size(); ++l) {
    const std::vector<double>& maxima = calibration.ranges.maxima[l];
    file.tensors[prefix + "activation_max" + std::to_string(l)] =
        Tensor::from_values(maxima, {static_cast<std::int64_t>(maxima.size())}, DType::f64);
  }
}

HyperSynthesisCalibration load_calibration(const TensorFile& file, const std::string& prefix,
                                           const std::vector<codec::FloatConvLayer>& layers, const std::string& who) {
  const std::string context = who + ": integer hyper-synthesis calibration";
  auto values = [&](const std::string& name, std::int64_t min_count, std::int64_t max_count) {
    const Tensor& t = tensor(file, prefix + name, context);
    if (t.ndim() != 1 || t.dim(0) < min_count || t.dim(0) > max_count)
      throw IoError(context + ": tensor '" + prefix + name + "' is " + shape_str(t.shape()) + ", expected [" +
                    (min_count == max_count ? std::to_string(min_count)
                                            : std::to_string(min_count) + ".." + std::to_string(max_count)) + "]");
    std::vector<double> v = t.to_values();
    for (double x : v)
      if (!std::isfinite(x) || x < 0)
        throw IoError(context + ": tensor '" + prefix + name + "' holds " + std::to_string(x) +
                      " (finite values >= 0 expected)");
    return v;
  };
  HyperSynthesisCalibration calibration;
  calibration.scale_table = values("scale_table", 2, 1024);
  for (std::size_t i = 0; i < calibration.scale_table.size(); ++i)
    if (!(calibration.scale_table[i] > 0) || (i > 0 && !(calibration.scale_table[i] > calibration.scale_table[i - 1])))
      throw IoError(context + ": the scale table must be positive and increasing");
  calibration.headroom = values("activation_headroom", 1, 1)[0];
  if (!(calibration.headroom >= 1)) throw IoError(context + ": the activation headroom must be >= 1");
  for (std::size_t l = 0; l + 1 < layers.size(); ++l)
    calibration.ranges.maxima.push_back(
        values("activation_max" + std::to_string(l), layers[l].out_channels, layers[l].out_channels));
  return calibration;
}

codec::IntegerNetwork integer_hyper_synthesis(const std::vector<codec::FloatConvLayer>& layers,
                                              const HyperSynthesisCalibration& calibration, const std::string& who) {
  try {
    return codec::quantize_network(layers, calibration.ranges, calibration.scale_table, calibration.headroom);
  } catch (const ConfigError& e) {
    throw IoError(who + ": " + e.what());
  }
}

std::vector<std::vector<std::int32_t>> prior_samples(const codec::FactorizedCodingTables& tables, int count,
                                                     int side, std::uint64_t seed) {
  std::mt19937_64 random(seed);  // the standard fixes its sequence, so the samples are the same everywhere
  std::vector<std::vector<std::int32_t>> samples;
  const std::int64_t channels = tables.channels(), plane = std::int64_t(side) * side;
  for (int n = 0; n < count; ++n) {
    std::vector<std::int32_t> z(static_cast<std::size_t>(channels * plane));
    for (std::int64_t c = 0; c < channels; ++c) {
      const codec::CodingTable& table = tables.tables[c];
      for (std::int64_t i = 0; i < plane; ++i) {
        const std::uint32_t slot = static_cast<std::uint32_t>(random() >> (64 - codec::kPrecisionBits));
        std::int32_t symbol = 0;
        while (symbol + 1 < table.count() && table.cdf[symbol + 1] <= slot) ++symbol;
        z[c * plane + i] = table.min + symbol + tables.medians[c];
      }
    }
    samples.push_back(std::move(z));
  }
  return samples;
}

}  // namespace plexus::ae

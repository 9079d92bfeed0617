#include "hyperprior_coding.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr const char* kTransposed = "ConvTranspose2d";
constexpr const char* kConvolution = "Conv2d";
constexpr const char* kRelu = "ReLU";
constexpr const char* kLeakyRelu = "LeakyReLU";
constexpr const char* kConcat = "Concat";
constexpr const char* kSplit = "Split";
constexpr const char* kTanh = "Tanh";
constexpr const char* kAdd = "Add";
constexpr const char* kCheckerboardMask = "CheckerboardMask";

// A spec whose entropy parameters have no integer form; what() is the reason.
class NoIntegerForm : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

const Tensor& tensor(const TensorFile& file, const std::string& name, const std::string& who) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw IoError(who + ": tensor '" + name + "' is missing");
  return it->second;
}

// A tensor's values in f32: copied as they are from an f32 tensor (a model's
// weights are f32 once loaded), else rounded.
std::vector<float> f32_values(const Tensor& t) {
  if (t.dtype() == DType::f32) return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  const std::vector<double> values = t.to_values();
  return std::vector<float>(values.begin(), values.end());
}

Shape weight_shape(const codec::FloatConvLayer& l) {
  return l.transposed ? Shape{l.in_channels, l.out_channels, l.kernel, l.kernel}
                      : Shape{l.out_channels, l.in_channels, l.kernel, l.kernel};
}

bool is_convolution(const NodeSpec& node) { return node.type == kTransposed || node.type == kConvolution; }

// The spec's entropy-parameter nodes as a FloatNetwork, built backwards from
// the outputs so that it holds only the nodes they need, in an order where
// every node follows its inputs. Without a file the convolutions get no
// weights (enough to judge the graph). With `consumed` (the file itself), each
// weight and bias is erased from it once read.
class Translator {
 public:
  Translator(const std::vector<NodeSpec>& nodes, const EntropyParameterBlobs& blobs, const TensorFile* file,
             std::string who, TensorFile* consumed = nullptr)
      : blobs_(blobs), file_(file), consumed_(consumed), who_(std::move(who)) {
    for (const NodeSpec& node : nodes)
      for (const std::string& output : node.outputs) producer_[output] = &node;
    known_[blobs.hyper_latent] = Ref{0, Kind::activation};
    for (std::size_t k = 0; k < blobs.rounded.size(); ++k) {
      codec::FloatNode input;
      input.op = codec::IntegerOp::input;
      input.count = k < blobs.rounded_channels.size() ? blobs.rounded_channels[k] : 0;
      known_[blobs.rounded[k]] = add(std::move(input), Kind::fixed_point);
      if (k < blobs.context_inputs.size()) known_[blobs.context_inputs[k]] = known_[blobs.rounded[k]];
    }
    network_.scales = scale_source(blobs.scales);
    if (!blobs.means.empty()) network_.means = tensor_for(blobs.means).tensor;
    if (!blobs.rounded.empty()) {
      const Ref decoded = tensor_for(blobs.decoded);
      if (decoded.kind != Kind::fixed_point)
        refuse("the decoded latent '" + blobs.decoded +
               "' must be a slice's rounded latent plus Tanh outputs "
               "(Add, Concat); it is not");
      network_.decoded = decoded.tensor;
    }
    if (file_) network_.in_channels = input_channels_;
  }
  // Moved out, not copied: the weights of a large model's network are hundreds of megabytes.
  codec::FloatNetwork network() && { return std::move(network_); }

 private:
  enum class Kind { activation, accumulator, fixed_point };
  struct Ref {
    std::int32_t tensor = 0;
    Kind kind = Kind::activation;
    bool accumulator() const { return kind != Kind::activation; }
  };

  [[noreturn]] void refuse(const std::string& reason) const {
    throw NoIntegerForm("the entropy parameters (the nodes from the hyper-latent '" + blobs_.hyper_latent +
                        (blobs_.rounded.empty() ? "" : "' and the decoded slices") + "' to the scales" +
                        (blobs_.means.empty() ? "" : " and means") +
                        ") need an exact integer form, built from Conv2d, ConvTranspose2d, ReLU, LeakyReLU, "
                        "Concat and Split" +
                        (blobs_.rounded.empty() ? "" : ", Tanh, Add and CheckerboardMask") + "; " + reason);
  }

  Ref add(codec::FloatNode node, Kind kind) {
    network_.nodes.push_back(std::move(node));
    return Ref{static_cast<std::int32_t>(network_.nodes.size()), kind};
  }

  // An activation tensor for `ref`: an accumulator gets a rescale without activation function.
  Ref as_activation(Ref ref) {
    if (!ref.accumulator()) return ref;
    codec::FloatNode node;
    node.op = codec::IntegerOp::rescale;
    node.inputs = {ref.tensor};
    node.negative_slope = 1;
    return add(std::move(node), Kind::activation);
  }

  // The scales: a ReLU over an accumulator is absorbed into the thresholds.
  std::int32_t scale_source(const std::string& blob) {
    auto it = producer_.find(blob);
    if (it != producer_.end() && it->second->type == kRelu && it->second->inputs.size() == 1) {
      const Ref input = tensor_for(it->second->inputs[0]);
      if (input.accumulator()) return input.tensor;
    }
    return tensor_for(blob).tensor;
  }

  Ref tensor_for(const std::string& blob) {
    if (auto it = known_.find(blob); it != known_.end()) return it->second;
    auto it = producer_.find(blob);
    if (it == producer_.end())
      refuse("they read '" + blob + "', which the decoder cannot compute from the hyper-latent");
    const NodeSpec& node = *it->second;
    const Ref ref = translate(node, blob);
    known_[blob] = ref;
    return ref;
  }

  // Whether the decoder can compute `blob` from the hyper-latent (and the decoded slices).
  bool decodable(const std::string& blob) {
    if (blob == blobs_.hyper_latent || known_.count(blob)) return true;
    if (auto it = decodable_.find(blob); it != decodable_.end()) return it->second;
    decodable_[blob] = false;  // a cycle reads as not decodable
    auto it = producer_.find(blob);
    bool result = it != producer_.end();
    if (result)
      for (const std::string& input : it->second->inputs) result = result && decodable(input);
    return decodable_[blob] = result;
  }

  Ref translate(const NodeSpec& node, const std::string& blob) {
    const std::string name = "node '" + node.name + "' (" + node.type + ")";
    for (const std::string& input : node.inputs)
      if (!decodable(input))
        refuse(name + " reads '" + input + "', which the decoder cannot compute from the hyper-latent");
    if (node.inputs.size() != (node.type == kAdd ? 2u : 1u) && node.type != kConcat)
      refuse(name + " has " + std::to_string(node.inputs.size()) + " inputs");
    codec::FloatNode f;
    if (is_convolution(node)) {
      // The integer networks hold dense, undilated kernels only.
      if (node.params.value("groups", 1) != 1 || node.params.value("dilation", 1) != 1)
        refuse(name + " has groups or dilation other than 1");
      f.op = codec::IntegerOp::convolution;
      f.inputs = {as_activation(tensor_for(node.inputs[0])).tensor};
      f.conv = convolution(node);
      if (f.inputs[0] == 0 && file_) input_channels_ = f.conv.in_channels;
      return add(std::move(f), Kind::accumulator);
    }
    if (node.type == kRelu || node.type == kLeakyRelu) {
      const Ref input = tensor_for(node.inputs[0]);
      if (!input.accumulator())
        refuse(name + " does not read a convolution's output (directly or through Concat or Split)");
      f.op = codec::IntegerOp::rescale;
      f.inputs = {input.tensor};
      f.negative_slope = node.type == kRelu ? 0.0 : node.params.value("negative_slope", 0.01);
      if (!(f.negative_slope >= 0 && f.negative_slope <= 1))
        refuse(name + " has a negative slope of " + std::to_string(f.negative_slope) + " (0 to 1 is needed)");
      return add(std::move(f), Kind::activation);
    }
    if (node.type == kTanh && !blobs_.rounded.empty()) {
      const Ref input = tensor_for(node.inputs[0]);
      if (input.kind != Kind::accumulator)
        refuse(name + " does not read a convolution's output (directly or through Concat or Split)");
      f.op = codec::IntegerOp::tanh;
      f.inputs = {input.tensor};
      f.scale = node.params.value("scale", 1.0);
      if (!(std::abs(f.scale) <= 16))
        refuse(name + " has a scale of " + std::to_string(f.scale) + " (|scale| <= 16 is needed)");
      return add(std::move(f), Kind::fixed_point);
    }
    if (node.type == kAdd && !blobs_.rounded.empty()) {
      const Ref a = tensor_for(node.inputs[0]), b = tensor_for(node.inputs[1]);
      if (a.kind != Kind::fixed_point || b.kind != Kind::fixed_point)
        refuse(name + " adds '" + node.inputs[0] + "' and '" + node.inputs[1] +
               "'; only rounded latents, Tanh outputs and their sums can be added");
      f.op = codec::IntegerOp::add;
      f.inputs = {a.tensor, b.tensor};
      return add(std::move(f), Kind::fixed_point);
    }
    if (node.type == kCheckerboardMask && !blobs_.rounded.empty()) {
      const Ref input = tensor_for(node.inputs[0]);
      const std::string keep = node.params.value("keep", std::string());
      if (keep != "even" && keep != "odd") refuse(name + " keeps neither \"even\" nor \"odd\" positions");
      f.op = codec::IntegerOp::checkerboard_mask;
      f.inputs = {input.tensor};
      f.parity = keep == "odd" ? 1 : 0;
      return add(std::move(f), input.kind);
    }
    if (node.type == kConcat) {
      std::vector<Ref> inputs;
      bool all_accumulators = true, all_fixed = true;
      for (const std::string& input : node.inputs) {
        inputs.push_back(tensor_for(input));
        all_accumulators &= inputs.back().accumulator();
        all_fixed &= inputs.back().kind == Kind::fixed_point;
      }
      f.op = codec::IntegerOp::concat;
      for (Ref input : inputs) f.inputs.push_back(all_accumulators ? input.tensor : as_activation(input).tensor);
      return add(std::move(f), all_fixed ? Kind::fixed_point : all_accumulators ? Kind::accumulator : Kind::activation);
    }
    if (node.type == kSplit) {
      const Ref input = tensor_for(node.inputs[0]);
      const std::vector<std::int64_t> sizes = node.params.value("sizes", std::vector<std::int64_t>{});
      const std::size_t k =
          static_cast<std::size_t>(std::find(node.outputs.begin(), node.outputs.end(), blob) - node.outputs.begin());
      if (sizes.size() != node.outputs.size() || k >= sizes.size()) refuse(name + " has no size for '" + blob + "'");
      const std::int64_t begin =
          std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(k), std::int64_t(0));
      f.op = codec::IntegerOp::slice;
      f.inputs = {input.tensor};
      f.begin = static_cast<std::int32_t>(begin);
      f.count = static_cast<std::int32_t>(sizes[k]);
      return add(std::move(f), input.kind);
    }
    refuse(name + " has no exact integer form");
  }

  codec::FloatConvLayer convolution(const NodeSpec& node) const {
    codec::FloatConvLayer layer;
    layer.transposed = node.type == kTransposed;
    layer.kernel = static_cast<std::int32_t>(node.params.value("kernel", 1));
    layer.stride = static_cast<std::int32_t>(node.params.value("stride", 1));
    layer.padding = static_cast<std::int32_t>(node.params.value("padding", 0));
    layer.output_padding = static_cast<std::int32_t>(node.params.value("output_padding", 0));
    layer.out_channels = static_cast<std::int32_t>(node.params.value("out_channels", 0));
    if (!file_) return layer;
    const Tensor& weight = tensor(*file_, node.name + ".weight", who_);
    if (weight.ndim() != 4) throw IoError(who_ + ": tensor '" + node.name + ".weight' is " + shape_str(weight.shape()));
    layer.in_channels = static_cast<std::int32_t>(weight.dim(layer.transposed ? 0 : 1));
    if (weight.shape() != weight_shape(layer))
      throw IoError(who_ + ": tensor '" + node.name + ".weight' is " + shape_str(weight.shape()) + ", expected " +
                    shape_str(weight_shape(layer)));
    layer.weight = f32_values(weight);
    if (consumed_) consumed_->tensors.erase(node.name + ".weight");
    // A masked Conv2d (mask "A" or "B") computes with its masked taps zero, whatever the file holds there.
    const std::string mask = node.params.value("mask", std::string("none"));
    if (!layer.transposed && (mask == "A" || mask == "B")) {
      const std::size_t taps = static_cast<std::size_t>(layer.kernel) * layer.kernel;
      const std::size_t first = (taps - 1) / 2 + (mask == "B" ? 1 : 0);
      for (std::size_t n = 0; n < layer.weight.size(); ++n)
        if (n % taps >= first) layer.weight[n] = 0;
    }
    if (node.params.value("bias", true)) {
      const Tensor& bias = tensor(*file_, node.name + ".bias", who_);
      if (bias.shape() != Shape{layer.out_channels})
        throw IoError(who_ + ": tensor '" + node.name + ".bias' is " + shape_str(bias.shape()));
      layer.bias = bias.to_values();
      if (consumed_) consumed_->tensors.erase(node.name + ".bias");
    } else {
      layer.bias.assign(static_cast<std::size_t>(layer.out_channels), 0.0);
    }
    return layer;
  }

  EntropyParameterBlobs blobs_;
  const TensorFile* file_;
  TensorFile* consumed_;
  std::string who_;
  std::map<std::string, const NodeSpec*> producer_;
  std::map<std::string, Ref> known_;
  std::map<std::string, bool> decodable_;
  codec::FloatNetwork network_;
  std::int32_t input_channels_ = 0;
};

}  // namespace

std::optional<std::string> entropy_parameters_problem(const std::vector<NodeSpec>& nodes,
                                                      const EntropyParameterBlobs& blobs) {
  try {
    (void)Translator(nodes, blobs, nullptr, "").network();
  } catch (const NoIntegerForm& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

namespace {
codec::FloatNetwork translated_network(const std::vector<NodeSpec>& nodes, const EntropyParameterBlobs& blobs,
                                       const TensorFile& file, const std::string& who, TensorFile* consumed) {
  codec::FloatNetwork network;
  try {
    network = Translator(nodes, blobs, &file, who, consumed).network();
  } catch (const NoIntegerForm& e) {
    throw ConfigError(who + ": " + e.what());
  }
  if (network.in_channels < 1)
    throw ConfigError(who + ": the entropy parameters have no convolution reading the hyper-latent '" +
                      blobs.hyper_latent + "'");
  network.channels();  // every convolution reads the channels its input has (ConfigError otherwise)
  return network;
}
}  // namespace

codec::FloatNetwork float_entropy_parameters(const std::vector<NodeSpec>& nodes, const EntropyParameterBlobs& blobs,
                                             const TensorFile& file, const std::string& who) {
  return translated_network(nodes, blobs, file, who, nullptr);
}

codec::FloatNetwork take_float_entropy_parameters(const std::vector<NodeSpec>& nodes,
                                                  const EntropyParameterBlobs& blobs, TensorFile& file,
                                                  const std::string& who) {
  return translated_network(nodes, blobs, file, who, &file);
}

std::string integer_network_prefix(const std::string& gaussian_node) { return gaussian_node + ".coding."; }

bool has_calibration(const TensorFile& file, const std::string& prefix) {
  return file.tensors.count(prefix + "scale_table") > 0;
}

void store_calibration(const IntegerNetworkCalibration& calibration, const std::string& prefix, TensorFile& file) {
  const std::int64_t levels = static_cast<std::int64_t>(calibration.scale_table.size());
  file.tensors[prefix + "scale_table"] = Tensor::from_values(calibration.scale_table, {levels}, DType::f64);
  file.tensors[prefix + "activation_headroom"] = Tensor::from_values({calibration.headroom}, {1}, DType::f64);
  for (std::size_t l = 0; l < calibration.ranges.maxima.size(); ++l) {
    const std::vector<double>& maxima = calibration.ranges.maxima[l];
    file.tensors[prefix + "activation_max" + std::to_string(l)] =
        Tensor::from_values(maxima, {static_cast<std::int64_t>(maxima.size())}, DType::f64);
  }
  if (!calibration.tanh_table.empty())
    file.tensors[prefix + "tanh_table"] = Tensor::from_values(
        calibration.tanh_table, {static_cast<std::int64_t>(calibration.tanh_table.size())}, DType::f64);
}

std::vector<double> unit_tanh_table() {
  std::vector<double> table(std::size_t(1) << 13);
  for (std::size_t i = 0; i < table.size(); ++i)
    table[i] = std::tanh(std::ldexp(static_cast<double>(i), -codec::kTanhTableBits));
  return table;
}

IntegerNetworkCalibration load_calibration(const TensorFile& file, const std::string& prefix,
                                           const codec::FloatNetwork& network, const std::string& who) {
  const std::string context = who + ": integer network calibration";
  auto values = [&](const std::string& name, std::int64_t min_count, std::int64_t max_count) {
    const Tensor& t = tensor(file, prefix + name, context);
    if (t.ndim() != 1 || t.dim(0) < min_count || t.dim(0) > max_count)
      throw IoError(context + ": tensor '" + prefix + name + "' is " + shape_str(t.shape()) + ", expected [" +
                    (min_count == max_count ? std::to_string(min_count)
                                            : std::to_string(min_count) + ".." + std::to_string(max_count)) +
                    "]");
    std::vector<double> v = t.to_values();
    for (double x : v)
      if (!std::isfinite(x) || x < 0)
        throw IoError(context + ": tensor '" + prefix + name + "' holds " + std::to_string(x) +
                      " (finite values >= 0 expected)");
    return v;
  };
  IntegerNetworkCalibration calibration;
  calibration.scale_table = values("scale_table", 2, 1024);
  for (std::size_t i = 0; i < calibration.scale_table.size(); ++i)
    if (!(calibration.scale_table[i] > 0) || (i > 0 && !(calibration.scale_table[i] > calibration.scale_table[i - 1])))
      throw IoError(context + ": the scale table must be positive and increasing");
  calibration.headroom = values("activation_headroom", 1, 1)[0];
  if (!(calibration.headroom >= 1)) throw IoError(context + ": the activation headroom must be >= 1");
  const std::vector<std::int32_t> channels = network.channels();
  std::size_t l = 0;
  for (const codec::FloatNode& node : network.nodes) {
    if (node.op != codec::IntegerOp::rescale) continue;
    const std::int64_t count = channels[static_cast<std::size_t>(node.inputs[0])];
    calibration.ranges.maxima.push_back(values("activation_max" + std::to_string(l++), count, count));
  }
  const bool tanh = std::any_of(network.nodes.begin(), network.nodes.end(),
                                [](const codec::FloatNode& node) { return node.op == codec::IntegerOp::tanh; });
  if (tanh) {
    calibration.tanh_table = values("tanh_table", 2, codec::kMaxTanhTable);
    for (std::size_t i = 0; i < calibration.tanh_table.size(); ++i)
      if (calibration.tanh_table[i] > 1 || (i > 0 && calibration.tanh_table[i] < calibration.tanh_table[i - 1]))
        throw IoError(context + ": the tanh table must rise from 0 to at most 1");
  }
  return calibration;
}

codec::IntegerNetwork integer_entropy_parameters(codec::FloatNetwork network,
                                                 const IntegerNetworkCalibration& calibration, const std::string& who) {
  try {
    network.tanh_table = calibration.tanh_table;
    return codec::quantize_network(std::move(network), calibration.ranges, calibration.scale_table,
                                   calibration.headroom);
  } catch (const ConfigError& e) {
    throw IoError(who + ": " + e.what());
  }
}

std::vector<std::vector<std::int32_t>> prior_samples(const codec::FactorizedCodingTables& tables, int count, int side,
                                                     std::uint64_t seed) {
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

}  // namespace plexus::codec

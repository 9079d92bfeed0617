#include "plexus/codec/codec_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "plexus/codec/autoencoder_contract.h"
#include "convolution/convolution.h"
#include "factorized_entropy_model/factorized_entropy_model.h"
#include "gdn/gdn.h"
#include "autoregressive_coding.h"
#include "banded_transform.h"
#include "codec_graph.h"
#include "grouped_checkerboard_coding.h"
#include "hyperprior_coding.h"
#include "model_fingerprint.h"
#include "network_structure.h"
#include "plexus/checksum.h"
#include "plexus/cpu_gemm_blocking.h"
#include "plexus/cpu_parallel.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr const char* kTablesMetadataKey = "plexus_ae.coding_tables";
constexpr const char* kIntegerMetadataKey = "plexus_ae.integer_hyper_synthesis";
// Calibration without images: this many hyper-latents of side kPriorSide from the prior.
constexpr int kPriorSamples = 8;
constexpr int kPriorSide = 6;
constexpr int kGroupedPriorSamples = 8;
constexpr int kGroupedPriorSide = 4;
constexpr double kContextRangeWidening = 8;
// Hyper-latent positions per band of a one-group integer network (banded_network_outputs): its rows per band are
// this over the hyper-latent's width, so that its tensors take about the same memory at any width.
constexpr std::int64_t kNetworkBandPositions = 2048;

// Copies every parameter of `net` from the file's tensor of the same name.
void load_weights(Net& net, const TensorFile& file, const std::string& who) {
  for (const NamedParameter& named : net.parameters()) {
    auto it = file.tensors.find(named.name);
    if (it == file.tensors.end()) throw IoError("'" + who + "' has no tensor '" + named.name + "'");
    Tensor& value = named.parameter->value;
    if (it->second.shape() != value.shape())
      throw IoError("'" + who + "': tensor '" + named.name + "' is " + shape_str(it->second.shape()) +
                    " in the file but " + shape_str(value.shape()) + " in the model");
    value.copy_from(it->second.to(value.dtype()));
  }
}

std::int64_t latent_channels(const TensorFile& file, const CodecGraph& graph, const std::string& who) {
  const std::string name = graph.entropy_node + ".matrix0";
  auto it = file.tensors.find(name);
  if (it == file.tensors.end() || it->second.ndim() < 1 || it->second.dim(0) < 1)
    throw IoError("'" + who + "' has no usable tensor '" + name + "' (the entropy model's first layer)");
  return it->second.dim(0);
}

codec::FactorizedCodingTables build_tables(const TensorFile& file, const CodecGraph& graph, const Registry& registry,
                                           std::int64_t channels, const std::string& who) {
  // The tables and the calibration sum Eigen products on the CPU, perhaps
  // before this process has made any Context (which would fix the blocking).
  fix_cpu_gemm_blocking();
  Net density(graph.density, registry, {{graph.factorized_latent, Shape{1, channels, 1, 1}}}, DType::f64, Device::cpu(),
              0, InitialParameters::for_loading);
  load_weights(density, file, who);
  const auto* model = dynamic_cast<const layers::FactorizedEntropyModel*>(&density.layer(graph.entropy_node));
  if (!model)
    throw ConfigError(graph.density.source + ": node '" + graph.entropy_node + "' is not the built-in " +
                      kEntropyModelType);
  return codec::build_coding_tables(*model);
}

// One calibration input: a hyper-latent [C, height, width] and, for a
// channel-conditional model, the latent y of the same image ([C_y, ...], or
// empty: each slice is then drawn from the model's own Gaussians).
struct CalibrationSample {
  std::vector<std::int32_t> hyper_latent;
  std::int64_t height = 0, width = 0;
  std::vector<float> latent;
};

bool is_checkerboard(const codec::FloatNetwork& network) {
  return std::any_of(network.nodes.begin(), network.nodes.end(),
                     [](const codec::FloatNode& node) { return node.op == codec::IntegerOp::checkerboard_mask; });
}

// Whether latent element n of a [C, h, w] latent (plane = h w) is a
// checkerboard's anchor, (row + column) even: coded in the first pass.
bool is_anchor(std::size_t n, std::size_t plane, std::size_t width) {
  const std::size_t position = n % plane;
  return (position / width + position % width) % 2 == 0;
}

// A checkerboard's two passes on one calibration sample, as the codec runs
// them: the rounded latent zero, then the anchors' round(y - mean) + mean
// (or mean + round(scale * N(0, 1))) with the other positions zero.
void calibrate_checkerboard(const codec::FloatNetwork& network, codec::FloatEvaluation& evaluation,
                            const CalibrationSample& sample, std::mt19937_64& random) {
  const codec::Side side = codec::network_sides(
      network, sample.height, sample.width)[static_cast<std::size_t>(codec::input_tensors(network)[0])];
  const std::size_t plane = static_cast<std::size_t>(side.first * side.second);
  std::vector<double> rounded(static_cast<std::size_t>(evaluation.groups()[0]) * plane, 0.0);
  evaluation.set_input(0, rounded);
  const codec::FloatOutputs anchors = evaluation.outputs(0);
  std::normal_distribution<double> normal;
  for (std::size_t n = 0; n < rounded.size(); ++n) {
    if (!is_anchor(n, plane, static_cast<std::size_t>(side.second))) continue;
    const double mean = anchors.means[n];
    rounded[n] = mean + (sample.latent.empty() ? std::round(std::max(anchors.scales[n], 0.11) * normal(random))
                                               : std::round(sample.latent[n] - mean));
  }
  evaluation.set_input(0, std::move(rounded));
  evaluation.outputs(0);
}

// An autoregressive model's passes on one calibration sample: the rounded
// latent 0, then twice round(y - mean) + mean (or mean + round(scale *
// N(0, 1))) with the means of the pass before, so that the context and the
// parameters see values near the coder's, whose means at a position come
// from the latent decoded before it.
void calibrate_autoregressive(const codec::FloatNetwork& network, codec::FloatEvaluation& evaluation,
                              const CalibrationSample& sample, std::mt19937_64& random) {
  const codec::Side side = codec::network_sides(
      network, sample.height, sample.width)[static_cast<std::size_t>(codec::input_tensors(network)[0])];
  std::vector<double> rounded(static_cast<std::size_t>(evaluation.groups()[0] * side.first * side.second), 0.0);
  std::normal_distribution<double> normal;
  for (int pass = 0; pass < 3; ++pass) {
    evaluation.set_input(0, rounded);
    const codec::FloatOutputs outputs = evaluation.outputs(0);
    if (pass == 2) break;
    for (std::size_t n = 0; n < rounded.size(); ++n) {
      const double mean = outputs.means[n];
      rounded[n] = mean + (sample.latent.empty() ? std::round(std::max(outputs.scales[n], 0.11) * normal(random))
                                                 : std::round(sample.latent[n] - mean));
    }
  }
}

// Anchors drawn independently position by position (calibration on the
// prior) make the context network's outputs smaller than an image's, whose
// neighbouring anchors move together: the rescales computed from the rounded
// latent get ranges widened by kContextRangeWidening, 3 bits of their 15.
void widen_context_ranges(const codec::FloatNetwork& network, IntegerNetworkCalibration& calibration) {
  std::vector<bool> from_latent(network.nodes.size() + 1, false);
  std::size_t rescale = 0;
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const codec::FloatNode& node = network.nodes[n];
    from_latent[n + 1] = node.op == codec::IntegerOp::input;
    for (std::int32_t input : node.inputs) from_latent[n + 1] = from_latent[n + 1] || from_latent[input];
    if (node.op != codec::IntegerOp::rescale) continue;
    if (from_latent[n + 1])
      for (double& maximum : calibration.ranges.maxima[rescale]) maximum *= kContextRangeWidening;
    ++rescale;
  }
}

// The calibration of the entropy parameters on `samples`: the float network
// evaluated group by group as the codec does, each group's rounded latent
// round(y - mean) + mean (or mean + round(scale * N(0, 1))) fed back.
IntegerNetworkCalibration calibrate(const codec::FloatNetwork& network, const std::vector<CalibrationSample>& samples) {
  fix_cpu_gemm_blocking();  // as in build_tables
  IntegerNetworkCalibration calibration;
  std::mt19937_64 random(1);
  std::normal_distribution<double> normal;
  const bool grouped = network.decoded >= 0;
  for (const CalibrationSample& sample : samples) {
    codec::FloatEvaluation evaluation(network, sample.hyper_latent, sample.height, sample.width, &calibration.ranges);
    if (is_checkerboard(network) && evaluation.groups().size() > 1) {
      calibrate_grouped_checkerboard(network, evaluation, sample.height, sample.width, sample.latent, random);
      continue;
    }
    if (is_checkerboard(network)) {
      calibrate_checkerboard(network, evaluation, sample, random);
      continue;
    }
    if (codec::is_autoregressive_network(network)) {
      calibrate_autoregressive(network, evaluation, sample, random);
      continue;
    }
    std::size_t offset = 0;
    for (std::size_t k = 0; k < evaluation.groups().size(); ++k) {
      const codec::FloatOutputs outputs = evaluation.outputs(static_cast<std::int32_t>(k));
      if (!grouped) continue;
      std::vector<double> rounded(outputs.means.size());
      for (std::size_t n = 0; n < rounded.size(); ++n) {
        const double mean = outputs.means[n];
        rounded[n] = mean + (sample.latent.empty() ? std::round(std::max(outputs.scales[n], 0.11) * normal(random))
                                                   : std::round(sample.latent[offset + n] - mean));
      }
      offset += rounded.size();
      evaluation.set_input(static_cast<std::int32_t>(k), std::move(rounded));
    }
    if (grouped) evaluation.values(network.decoded, 0, network.channels()[static_cast<std::size_t>(network.decoded)]);
  }
  if ((is_checkerboard(network) || codec::is_autoregressive_network(network)) && !samples.empty() &&
      samples[0].latent.empty())
    widen_context_ranges(network, calibration);
  calibration.scale_table = codec::log_scale_table();
  const bool tanh = std::any_of(network.nodes.begin(), network.nodes.end(),
                                [](const codec::FloatNode& node) { return node.op == codec::IntegerOp::tanh; });
  if (tanh) calibration.tanh_table = unit_tanh_table();
  return calibration;
}

// Hyper-latents drawn from the prior: kPriorSamples of kPriorSide, or for a
// channel-conditional model (whose slice transforms cost far more per
// position) kGroupedPriorSamples of kGroupedPriorSide.
std::string calibrate_on_prior(const codec::FloatNetwork& network, const codec::FactorizedCodingTables& tables,
                               IntegerNetworkCalibration& calibration) {
  const bool grouped = network.decoded >= 0;
  const int count = grouped ? kGroupedPriorSamples : kPriorSamples, side = grouped ? kGroupedPriorSide : kPriorSide;
  std::vector<CalibrationSample> samples;
  for (std::vector<std::int32_t>& z : prior_samples(tables, count, side))
    samples.push_back({std::move(z), side, side, {}});
  calibration = calibrate(network, samples);
  return std::to_string(count) + " hyper-latents of " + std::to_string(side) + "x" + std::to_string(side) +
         " sampled from the prior" + (grouped ? ", the latent drawn from its Gaussians" : "");
}

// Refuses a latent with a value that is not finite or of magnitude >= 2^30:
// 2^30 keeps every symbol (round(v) - m, round(v - mean)) within 32 bits;
// a finite latent of a real image is far smaller.
void check_latent_values(const Tensor& latent, const char* what) {
  const float* values = latent.data<float>();
  const std::int64_t count = latent.numel(), plane = latent.dim(2) * latent.dim(3);
  for (std::int64_t n = 0; n < count; ++n)
    if (!(std::fabs(values[n]) < float(1 << 30)))
      throw Error(std::string("cannot compress: the ") + what + " holds " + std::to_string(values[n]) + " at channel " +
                  std::to_string(n / plane) + " (not a finite value of magnitude < 2^30; is the model trained?)");
}

// The integers of a latent tensor (rounded values of magnitude < 2^30).
std::vector<std::int32_t> latent_integers(const Tensor& latent, const char* what) {
  check_latent_values(latent, what);
  const float* values = latent.data<float>();
  std::vector<std::int32_t> integers(static_cast<std::size_t>(latent.numel()));
  for (std::size_t n = 0; n < integers.size(); ++n) integers[n] = static_cast<std::int32_t>(std::llround(values[n]));
  return integers;
}

// [1, C_0 + C_1 + ..., h, w] from [1, C_k, h, w] tensors (f32, CPU).
Tensor concat_channels(const std::vector<Tensor>& parts) {
  std::int64_t channels = 0;
  for (const Tensor& part : parts) channels += part.dim(1);
  Tensor joined({1, channels, parts[0].dim(2), parts[0].dim(3)});
  float* out = joined.data<float>();
  for (const Tensor& part : parts) {
    const float* values = part.data<float>();
    out = std::copy(values, values + part.numel(), out);
  }
  return joined;
}

// A mean in units of 2^-16, as a double (exact).
double mean_value(std::int64_t mean) { return std::ldexp(static_cast<double>(mean), -codec::kMeanFractionBits); }

// y_hat = symbol + mean: exact in f64 (|symbol| < 2^31, |mean| <= 2^31 in
// units of 2^-16), then one correctly rounded conversion to f32, so every
// machine gets the same value.
float reconstruct(std::int32_t symbol, std::int64_t mean) {
  return static_cast<float>(static_cast<double>(symbol) + mean_value(mean));
}

}  // namespace

std::unique_ptr<CodecModel> CodecModel::from_file(const std::string& path, const Registry& registry, Device device) {
  TensorFile file = load_safetensors(path);
  const ModelSpec spec = spec_from_checkpoint(file, path, registry);
  return std::make_unique<CodecModel>(spec, std::move(file), registry, device, path);
}

CodecModel::CodecModel(const ModelSpec& spec, TensorFile file, const Registry& registry, Device device,
                       std::string name)
    : name_(std::move(name)), device_(device) {
  check_contract(spec);
  rate_levels_ = codec::rate_levels(spec);
  stride_ = derive_stride(spec, registry);
  CodecGraph graph = split_for_coding(spec);
  kind_ = graph.kind;
  codec_section_ = graph.section;
  codec_fingerprint_ = graph.section_fingerprint;
  latent_ = graph.latent;
  synthesis_input_ = graph.synthesis_input;
  analysed_ = graph.analysed;
  hyper_latent_ = graph.hyper_latent;
  if (has_hyper_latent(kind_)) probe_hyperprior_stride(graph, spec, registry);
  const std::int64_t factorized_channels = build_transforms(graph, spec, file, registry);
  if (kind_ == ModelKind::checkerboard) group_channels_.push_back(group_channels_[0]);  // anchors, then the others
  if (kind_ == ModelKind::grouped_checkerboard)  // each group's anchors, then its others
    for (std::size_t k = group_channels_.size(); k-- > 0;)
      group_channels_.insert(group_channels_.begin() + static_cast<std::ptrdiff_t>(k), group_channels_[k]);
  const auto start = std::chrono::steady_clock::now();
  load_tables(graph, spec, file, registry, factorized_channels);
  if (computed_tables_)
    spdlog::info("'{}' has no coding tables{}; computed them in {:.0f} ms ('plexus-ae export --model {}' stores them "
                 "in the file)",
                 name_, has_hyper_latent(kind_) ? " or calibrated integer network" : "",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(), name_);
  fingerprint_ = compute_fingerprint(spec);
  if (const auto recorded = recorded_fingerprint(file.metadata, "'" + name_ + "'");
      recorded && *recorded != fingerprint_)
    throw IoError("'" + name_ + "' records the model fingerprint " + fingerprint_text(*recorded) +
                  " but its weights and tables give " + fingerprint_text(fingerprint_) +
                  ": the file was changed after export; export it again");
  ctx_ = std::make_unique<Context>(device, 0);
  ctx_->set_training(false);
}

void CodecModel::probe_hyperprior_stride(CodecGraph& graph, const ModelSpec& spec, const Registry& registry) {
  const HyperpriorGeometry geometry = probe_hyperprior_geometry(graph, spec, registry);
  latent_per_stride_ = geometry.latent_per_stride;
  stride_ = geometry.stride;
  if (!graph.parameter_blobs.rounded.empty()) graph.parameter_blobs.rounded_channels = geometry.analysed_channels;
}

// The analysis and synthesis nets with the file's weights, shaped for one
// stride-sized image; returns the channels the factorized tables cover.
std::int64_t CodecModel::build_transforms(const CodecGraph& graph, const ModelSpec& spec, const TensorFile& file,
                                          const Registry& registry) {
  const Shape image_shape{1, 3, stride_, stride_};
  AnalysisParts parts = split_analysis(graph.analysis, analysed_);
  analysis_outputs_ = parts.boundary;
  analysis_ = std::make_unique<Net>(parts.front, registry, model_input_shapes(parts.front, image_shape), DType::f32,
                                    device_, 0, InitialParameters::for_loading);
  load_weights(*analysis_, file, name_);
  if (!parts.rest.nodes.empty()) {
    std::map<std::string, Shape> shapes;
    for (const std::string& input : parts.rest.inputs)
      shapes[input] = analysis_->has_blob(input) ? analysis_->blob_shape(input) : Shape{1};
    hyper_analysis_ =
        std::make_unique<Net>(parts.rest, registry, shapes, DType::f32, device_, 0, InitialParameters::for_loading);
    load_weights(*hyper_analysis_, file, name_);
  }
  Shape latent_shape{1, 0, latent_per_stride_, latent_per_stride_};
  for (const std::string& blob : analysed_) {
    const Shape& shape = analysis_->blob_shape(blob);
    if (shape.size() != 4 || shape[2] != latent_per_stride_ || shape[3] != latent_per_stride_)
      throw ConfigError(spec.source + " cannot be used as a codec: a " + std::to_string(stride_) + "x" +
                        std::to_string(stride_) + " image gives a latent '" + blob + "' of " + shape_str(shape) +
                        ", not [1, C, " + std::to_string(latent_per_stride_) + ", " +
                        std::to_string(latent_per_stride_) + "]");
    latent_shape[1] += shape[1];
    group_channels_.push_back(static_cast<std::uint32_t>(shape[1]));
  }
  latent_channels_ = latent_shape[1];
  std::int64_t factorized_channels = latent_channels_;
  if (has_hyper_latent(kind_)) {
    const Net& hyper = hyper_analysis_ ? *hyper_analysis_ : *analysis_;
    const Shape& z = hyper.blob_shape(hyper_latent_);
    if (z.size() != 4 || z[2] != 1 || z[3] != 1)
      throw ConfigError(spec.source + " cannot be used as a codec: a " + std::to_string(stride_) + "x" +
                        std::to_string(stride_) + " image gives a hyper-latent '" + hyper_latent_ + "' of " +
                        shape_str(z) + ", not [1, Cz, 1, 1]");
    factorized_channels = z[1];
  }
  synthesis_ = std::make_unique<Net>(graph.synthesis, registry,
                                     model_input_shapes(graph.synthesis, synthesis_input_, latent_shape), DType::f32,
                                     device_, 0, InitialParameters::for_loading);
  load_weights(*synthesis_, file, name_);
  // Only ever run forward: each holds just what the codec reads, not every activation.
  if (hyper_analysis_) {
    analysis_->set_inference_only(analysis_outputs_);
    hyper_analysis_->set_inference_only({hyper_latent_});
  } else {
    std::vector<std::string> kept = analysis_outputs_;
    if (has_hyper_latent(kind_)) kept.push_back(hyper_latent_);
    analysis_->set_inference_only(kept);
  }
  synthesis_->set_inference_only({kReconstruction});
  banded_analysis_ = std::make_unique<BandedTransform>(*analysis_, kImage, analysis_outputs_);
  banded_synthesis_ =
      std::make_unique<BandedTransform>(*synthesis_, synthesis_input_, std::vector<std::string>{kReconstruction});
  for (Net* net : {analysis_.get(), hyper_analysis_.get(), synthesis_.get()})
    if (net)
      for (const NamedParameter& named : net->parameters())
        weight_bytes_ += static_cast<std::uint64_t>(named.parameter->value.numel()) * 4;
  return factorized_channels;
}

// The factorized tables and, for a hyperprior, the integer network and
// Gaussian tables: from the file, or computed (and computed_tables_ set)
// when it has none.
void CodecModel::load_tables(const CodecGraph& graph, const ModelSpec& spec, TensorFile& file, const Registry& registry,
                             std::int64_t factorized_channels) {
  const std::string prefix = codec::coding_tables_prefix(graph.entropy_node);
  if (codec::has_coding_tables(file, prefix)) {
    tables_ = codec::load_coding_tables(file, prefix, factorized_channels, "'" + name_ + "'");
  } else {
    tables_ = build_tables(file, graph, registry, factorized_channels, name_);
    computed_tables_ = true;
  }
  if (!has_hyper_latent(kind_)) return;
  IntegerNetworkCalibration calibration;
  codec::IntegerNetwork network;
  {
    // The float network is needed only to derive the integer one, and is
    // freed before the runner lays out its own copy of the weights; the file's
    // copy of its weights goes as they are read, and the float copy as they are
    // quantised, so the weights are held about once at a time.
    codec::FloatNetwork float_network =
        codec::take_float_entropy_parameters(spec.nodes, graph.parameter_blobs, file, "'" + name_ + "'");
    const std::string integer_prefix = integer_network_prefix(graph.gaussian_node);
    if (has_calibration(file, integer_prefix)) {
      calibration = load_calibration(file, integer_prefix, float_network, "'" + name_ + "'");
    } else {
      calibrate_on_prior(float_network, tables_, calibration);
      computed_tables_ = true;
    }
    network = codec::integer_entropy_parameters(std::move(float_network), calibration, "'" + name_ + "'");
  }
  // The sizes for one hyper-latent position (ShapeError when they do not work out).
  const Shape scales = network.in_channels != factorized_channels ? Shape{} : network.output_shape(1, 1);
  if (scales != Shape{latent_channels_, latent_per_stride_, latent_per_stride_})
    throw ConfigError(spec.source + " cannot be used as a codec: its entropy parameters map [" +
                      std::to_string(network.in_channels) + ", 1, 1] to " + shape_str(scales) +
                      ", but the hyper-latent has " + std::to_string(factorized_channels) +
                      " channels and the latent per hyper-latent position is [" + std::to_string(latent_channels_) +
                      ", " + std::to_string(latent_per_stride_) + ", " + std::to_string(latent_per_stride_) + "]");
  gaussian_ = codec::build_gaussian_tables(calibration.scale_table);
  if (kind_ == ModelKind::autoregressive) {
    try {
      autoregressive_ = std::make_unique<codec::AutoregressiveRunner>(network, device_);
    } catch (const ConfigError& e) {
      throw ConfigError(spec.source + " cannot be used as a codec: " + e.what());
    }
  }
  runner_ = std::make_unique<codec::IntegerNetworkRunner>(std::move(network), device_);
}

std::uint64_t CodecModel::compute_fingerprint(const ModelSpec& spec) {
  plexus::Fnv1a64 hash;
  hash.add_field("plexus-ae codec model");
  hash.add_field(spec.to_json().dump());
  std::map<std::string, const Tensor*> weights;  // sorted by name
  for (Net* net : {analysis_.get(), hyper_analysis_.get(), synthesis_.get()})
    if (net)
      for (const NamedParameter& named : net->parameters()) weights[named.name] = &named.parameter->value;
  for (const auto& [weight_name, tensor] : weights) hash_tensor(hash, weight_name, *tensor);
  for (std::int64_t c = 0; c < tables_.channels(); ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int32_t fields[] = {tables_.medians[c], table.min, static_cast<std::int32_t>(table.cdf.size())};
    hash.add(fields, sizeof fields);
    hash.add(table.cdf.data(), table.cdf.size() * sizeof(table.cdf[0]));
  }
  if (has_hyper_latent(kind_)) hash_hyperprior(hash, runner_->network(), gaussian_);
  return hash.value();
}

CodecModel::~CodecModel() = default;

void CodecModel::set_format_version(std::uint16_t version) {
  if (version != kSectionedVersion && version != codec::format_version(kind_))
    throw ConfigError("'" + name_ + "' writes format version " + std::to_string(kSectionedVersion) + " or " +
                      std::to_string(codec::format_version(kind_)) + " (that of a " + model_kind_name(kind_) +
                      " model), not " + std::to_string(version));
  format_version_ = version;
}

void CodecModel::set_rate_level(double level) {
  if (rate_levels_ == 0)
    throw ConfigError("'" + name_ + "' is a model of one rate; a rate level applies only to a variable-rate model");
  if (!(level >= 0 && level <= rate_levels_ - 1))
    throw ConfigError("rate level " + std::to_string(level) + " is out of range: '" + name_ + "' has levels 0 to " +
                      std::to_string(rate_levels_ - 1) + " (fractional levels interpolate)");
  rate_level_ = static_cast<std::uint32_t>(std::llround(level * kRateLevelOne));
}

const codec::IntegerNetwork& CodecModel::integer_network() const {
  static const codec::IntegerNetwork kNone;
  return runner_ ? runner_->network() : kNone;
}

CodecModel::Latents CodecModel::analyse(const data::Image& image) {
  if (image.width < 1 || image.height < 1 || static_cast<std::uint32_t>(image.width) > kMaxImageSide ||
      static_cast<std::uint32_t>(image.height) > kMaxImageSide ||
      static_cast<std::uint64_t>(image.width) * image.height > max_pixels_)
    throw ConfigError("a " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                      " image is outside what the format holds (each side 1.." + std::to_string(kMaxImageSide) +
                      ", at most " + std::to_string(max_pixels_) + " pixels)");
  const int padded_width = (image.width + stride_ - 1) / stride_ * stride_;
  const int padded_height = (image.height + stride_ - 1) / stride_ * stride_;
  check_memory(image.width, image.height, false);
  const Shape shape{1, 3, padded_height, padded_width};
  const std::vector<BandedTransform::Band> bands =
      banded_analysis_->plan(shape, band_rows(*banded_analysis_, shape, false));
  std::map<std::string, Tensor> whole;  // the analysis's outputs, whole, on the CPU
  for (const std::string& blob : analysis_outputs_) whole.emplace(blob, Tensor(analysis_->blob_shape(blob)));
  for (std::size_t k = 0; k < bands.size(); ++k) {
    const BandedTransform::Band& band = bands[k];
    const std::int64_t rows = band.input.end - band.input.first;
    banded_analysis_->reshape({1, 3, rows, padded_width});
    // The band's rows of the image padded by repeating its edge pixels, as data::pad_replicate and image_to_tensor.
    Tensor input({1, 3, rows, padded_width});
    float* values = input.data<float>();
    const std::size_t plane = static_cast<std::size_t>(rows) * padded_width;
    for (std::int64_t r = 0; r < rows; ++r) {
      const int source_row = std::min(static_cast<int>(band.input.first + r), image.height - 1);
      for (int x = 0; x < padded_width; ++x) {
        const int source_x = std::min(x, image.width - 1);
        const std::size_t pixel = static_cast<std::size_t>(r) * padded_width + x;
        for (int c = 0; c < 3; ++c) values[c * plane + pixel] = image.at(source_row, source_x, c) / 255.0f;
      }
    }
    analysis_->input(kImage).copy_from(input);
    banded_analysis_->set_origins(band.input.first);
    codec::set_rate_level(*ctx_, *analysis_, rate_level());
    analysis_->forward(*ctx_);
    for (const std::string& blob : analysis_outputs_) {
      const Tensor& value = analysis_->blob(blob);
      const Tensor host = device_.is_cpu() ? Tensor() : value.to(Device::cpu());
      copy_rows(device_.is_cpu() ? value : host, band.output.first - banded_analysis_->blob_row(blob, band.input.first),
                whole.at(blob), band.output.first, band.output.end - band.output.first);
    }
    if (progress_) progress_((k + 1.0) / bands.size());
  }
  Latents latents;
  if (analysed_.size() == 1) {
    latents.latent = whole.at(analysed_[0]);
  } else {  // a channel-conditional model's slices, joined
    std::vector<Tensor> slices;
    for (const std::string& blob : analysed_) slices.push_back(whole.at(blob));
    latents.latent = concat_channels(slices);
  }
  if (hyper_analysis_) {
    std::map<std::string, Shape> shapes;
    for (const std::string& input : hyper_analysis_->spec().inputs)
      shapes[input] = whole.count(input) ? whole.at(input).shape() : Shape{1};
    hyper_analysis_->reshape(shapes);
    for (const std::string& input : hyper_analysis_->spec().inputs)
      if (whole.count(input)) hyper_analysis_->input(input).copy_from(whole.at(input));
    codec::set_rate_level(*ctx_, *hyper_analysis_, rate_level());
    hyper_analysis_->forward(*ctx_);
    const Tensor& z = hyper_analysis_->blob(hyper_latent_);
    latents.hyper_latent = device_.is_cpu() ? z.clone() : z.to(Device::cpu());
  } else if (has_hyper_latent(kind_)) {
    throw Error("'" + name_ + "': the hyper-latent '" + hyper_latent_ + "' is not computed from the latent");
  }
  BitstreamHeader& header = latents.header;
  header.version = format_version_;
  header.kind = kind_;
  header.codec_fingerprint = codec_fingerprint_;
  header.fingerprint = fingerprint_;
  header.width = static_cast<std::uint32_t>(image.width);
  header.height = static_cast<std::uint32_t>(image.height);
  header.channels = static_cast<std::uint32_t>(latents.latent.dim(1));
  header.latent_height = static_cast<std::uint32_t>(latents.latent.dim(2));
  header.latent_width = static_cast<std::uint32_t>(latents.latent.dim(3));
  if (has_hyper_latent(kind_)) {
    header.hyper_channels = static_cast<std::uint32_t>(latents.hyper_latent.dim(1));
    header.hyper_height = static_cast<std::uint32_t>(latents.hyper_latent.dim(2));
    header.hyper_width = static_cast<std::uint32_t>(latents.hyper_latent.dim(3));
  }
  header.variable_rate = rate_levels_ > 0;
  header.rate_level = rate_level_;
  return latents;
}

CodecModel::Latents CodecModel::encode_latents(const data::Image& image) {
  Latents latents = analyse(image);
  if (!has_hyper_latent(kind_)) return latents;
  const std::vector<std::int32_t> z = latent_integers(latents.hyper_latent, "hyper-latent");
  check_latent_values(latents.latent, "latent");
  const Tensor y = std::move(latents.latent);  // code_groups replaces it with y_hat
  const float* values = y.data<float>();
  code_groups(
      z, latents, [&](std::size_t, const std::vector<std::size_t>& elements, const codec::IntegerOutputs& outputs) {
        std::vector<std::int32_t> symbols(outputs.indices.size());
        for (std::size_t n = 0; n < symbols.size(); ++n) {
          const double v = values[elements[n]];
          symbols[n] = static_cast<std::int32_t>(
              outputs.means.empty() ? std::llround(v) : std::llround(std::round(v - mean_value(outputs.means[n]))));
        }
        return symbols;
      });
  return latents;
}

void CodecModel::code_groups(const std::vector<std::int32_t>& z, Latents& latents, const SymbolSource& symbols_of) {
  const BitstreamHeader& header = latents.header;
  // A scale or mean-scale hyperprior (one group, coded whole): its network on bands of rows of z
  // (banded_network_outputs). The kinds coded group by group, pass by pass or position by position keep
  // the whole network's state between their steps.
  const bool banded = device_.is_cpu() &&
                      (kind_ == ModelKind::hyperprior || kind_ == ModelKind::mean_scale_hyperprior) &&
                      runner_->groups().size() == 1;
  if (!banded) runner_->start(z, header.hyper_height, header.hyper_width);
  latents.indices.clear();
  latents.symbols.clear();
  latents.means.clear();
  // Coded in passes or position by position (checkerboards, autoregressive), not a whole group at a time.
  const bool positionwise = kind_ == ModelKind::checkerboard || kind_ == ModelKind::grouped_checkerboard ||
                            kind_ == ModelKind::autoregressive;
  const std::size_t groups = positionwise ? 0 : runner_->groups().size();
  if (kind_ == ModelKind::checkerboard) code_checkerboard(latents, symbols_of);
  if (kind_ == ModelKind::grouped_checkerboard)
    code_grouped_checkerboard(*runner_, header.latent_height, header.latent_width, latents, symbols_of);
  if (kind_ == ModelKind::autoregressive) code_autoregressive(latents, symbols_of);
  const std::int64_t network_rows =
      band_rows_ > 0 ? band_rows_ : std::max<std::int64_t>(1, kNetworkBandPositions / header.hyper_width);
  for (std::size_t k = 0; k < groups; ++k) {
    codec::IntegerOutputs outputs =
        banded ? banded_network_outputs(*runner_, z, header.hyper_height, header.hyper_width, network_rows)
               : runner_->outputs(static_cast<std::int32_t>(k));
    std::vector<std::size_t> elements(outputs.indices.size());
    std::iota(elements.begin(), elements.end(), latents.symbols.size());
    std::vector<std::int32_t> symbols = symbols_of(k, elements, outputs);
    if (kind_ == ModelKind::channel_conditional) {
      // The rounded slice symbol + mean, in units of 2^-16, for the slices after it.
      std::vector<std::int64_t> rounded(symbols.size());
      for (std::size_t n = 0; n < symbols.size(); ++n)
        rounded[n] =
            static_cast<std::int64_t>(symbols[n]) * (std::int64_t(1) << codec::kMeanFractionBits) + outputs.means[n];
      runner_->set_input(static_cast<std::int32_t>(k), rounded);
    }
    if (groups == 1) {  // moved, not copied: a 12-megapixel photo's take 150 MB
      latents.indices = std::move(outputs.indices);
      latents.means = std::move(outputs.means);
      latents.symbols = std::move(symbols);
    } else {
      latents.indices.insert(latents.indices.end(), outputs.indices.begin(), outputs.indices.end());
      latents.means.insert(latents.means.end(), outputs.means.begin(), outputs.means.end());
      latents.symbols.insert(latents.symbols.end(), symbols.begin(), symbols.end());
    }
  }
  Tensor latent({1, static_cast<std::int64_t>(header.channels), header.latent_height, header.latent_width});
  float* y = latent.data<float>();
  if (kind_ == ModelKind::channel_conditional || kind_ == ModelKind::grouped_checkerboard) {
    // The decoded latent, fixed point: exact in f64, then one rounding to f32.
    const std::vector<std::int64_t> decoded =
        runner_->values(runner_->network().decoded, 0, static_cast<std::int32_t>(header.channels));
    for (std::size_t n = 0; n < decoded.size(); ++n) y[n] = static_cast<float>(mean_value(decoded[n]));
  } else {
    for (std::size_t n = 0; n < latents.symbols.size(); ++n)
      y[n] = latents.means.empty() ? static_cast<float>(latents.symbols[n])
                                   : reconstruct(latents.symbols[n], latents.means[n]);
  }
  latents.latent = latent;
  // The runner holds the image's tensors until the next image: a 1x1 one frees them.
  runner_->start(std::vector<std::int32_t>(static_cast<std::size_t>(runner_->network().in_channels), 0), 1, 1);
}

// Pass 0 codes the anchors with the parameters the network gives for a
// rounded latent of zeros (from z alone); pass 1 the other positions, with
// the decoded anchors (symbol * 2^16 + mean, the others 0) as the rounded
// latent. Each pass computes every position at once and keeps its own.
void CodecModel::code_checkerboard(Latents& latents, const SymbolSource& symbols_of) {
  const BitstreamHeader& header = latents.header;
  const std::size_t width = header.latent_width, plane = std::size_t(header.latent_height) * width;
  const std::size_t count = header.channels * plane;
  latents.indices.assign(count, 0);
  latents.symbols.assign(count, 0);
  latents.means.assign(count, 0);
  std::vector<std::int64_t> rounded(count, 0);
  for (std::size_t pass = 0; pass < 2; ++pass) {
    runner_->set_input(0, rounded);
    const codec::IntegerOutputs all = runner_->outputs(0);
    codec::IntegerOutputs outputs;
    std::vector<std::size_t> elements;
    for (std::size_t n = 0; n < count; ++n)
      if (is_anchor(n, plane, width) == (pass == 0)) {
        elements.push_back(n);
        outputs.indices.push_back(all.indices[n]);
        outputs.means.push_back(all.means[n]);
      }
    const std::vector<std::int32_t> symbols = symbols_of(pass, elements, outputs);
    for (std::size_t k = 0; k < elements.size(); ++k) {
      const std::size_t n = elements[k];
      latents.indices[n] = outputs.indices[k];
      latents.symbols[n] = symbols[k];
      latents.means[n] = outputs.means[k];
      rounded[n] =
          static_cast<std::int64_t>(symbols[k]) * (std::int64_t(1) << codec::kMeanFractionBits) + outputs.means[k];
    }
  }
}

// Step by step of the wavefront (autoregressive_coding.h): each step's
// indices and means from z and the positions before it, its symbols (element
// k * C + c its k-th position's channel c), then its rounded latent symbol *
// 2^16 + mean back into the network for the steps after it.
void CodecModel::code_autoregressive(Latents& latents, const SymbolSource& symbols_of) {
  const BitstreamHeader& header = latents.header;
  const std::int64_t height = header.latent_height, width = header.latent_width;
  const std::size_t plane = static_cast<std::size_t>(height * width), channels = header.channels;
  latents.indices.assign(channels * plane, 0);
  latents.symbols.assign(channels * plane, 0);
  latents.means.assign(channels * plane, 0);
  autoregressive_->start(*runner_, height, width);
  for (const std::vector<std::int64_t>& positions : codec::wavefront_steps(height, width, autoregressive_->slope())) {
    const codec::IntegerOutputs outputs = autoregressive_->outputs(positions);
    std::vector<std::size_t> elements(outputs.indices.size());
    for (std::size_t k = 0; k < positions.size(); ++k)
      for (std::size_t c = 0; c < channels; ++c)
        elements[k * channels + c] = c * plane + static_cast<std::size_t>(positions[k]);
    const std::vector<std::int32_t> symbols = symbols_of(0, elements, outputs);
    std::vector<std::int64_t> rounded(symbols.size());
    for (std::size_t e = 0; e < elements.size(); ++e) {
      const std::size_t n = elements[e];
      latents.indices[n] = outputs.indices[e];
      latents.symbols[n] = symbols[e];
      latents.means[n] = outputs.means[e];
      rounded[e] =
          static_cast<std::int64_t>(symbols[e]) * (std::int64_t(1) << codec::kMeanFractionBits) + outputs.means[e];
    }
    autoregressive_->set(positions, rounded);
  }
  autoregressive_->finish();
}

Tensor CodecModel::encode_latent(const data::Image& image) { return encode_latents(image).latent; }

std::vector<std::uint8_t> CodecModel::compress(const data::Image& image, bool grey) {
  Latents latents = encode_latents(image);
  // The coding reads the symbols and indices (and the factorized latent): the rest goes first.
  if (has_hyper_latent(kind_)) latents.latent = Tensor();
  std::vector<std::int64_t>().swap(latents.means);
  latents.header.grey = grey;
  // One rANS stream per coded stream (version 5), or one for all (versions 1 to 4).
  const bool hyperprior = has_hyper_latent(kind_);
  const bool positionwise = kind_ == ModelKind::checkerboard || kind_ == ModelKind::grouped_checkerboard ||
                            kind_ == ModelKind::autoregressive;
  const bool sectioned = format_version_ == kSectionedVersion;
  const std::size_t streams = hyperprior ? 1 + group_channels_.size() : 1;
  std::vector<codec::RansEncoder> encoders(sectioned ? streams : 1);
  auto encoder = [&](std::size_t stream) -> codec::RansEncoder& { return encoders[sectioned ? stream : 0]; };
  // The factorized symbols s = v - m_c, channel by channel: the latent, or a hyperprior's hyper-latent.
  const Tensor& factorized = hyperprior ? latents.hyper_latent : latents.latent;
  const std::vector<std::int32_t> values = latent_integers(factorized, hyperprior ? "hyper-latent" : "latent");
  const std::int64_t plane = factorized.dim(2) * factorized.dim(3);
  for (std::size_t n = 0; n < values.size(); ++n) {
    const std::int64_t c = static_cast<std::int64_t>(n) / plane;
    encoder(0).put(static_cast<std::int32_t>(values[n] - static_cast<std::int64_t>(tables_.medians[c])),
                   tables_.tables[c]);
  }
  if (hyperprior) {
    // Then the latent's symbols (y_hat, or round(y - mean)), each with the Gaussian table of its index,
    // group by group (a group's values are contiguous: its channels, whole planes).
    const std::size_t latent_plane =
        static_cast<std::size_t>(latents.header.latent_height) * latents.header.latent_width;
    std::size_t first = 0;
    for (std::size_t k = 0; k < group_channels_.size() && !positionwise; ++k) {
      const std::size_t last = first + group_channels_[k] * latent_plane;
      for (std::size_t n = first; n < last; ++n)
        encoder(1 + k).put(latents.symbols[n], gaussian_.tables[latents.indices[n]]);
      first = last;
    }
    // Grouped checkerboards: stream 1 + 2k + p holds group k's pass p.
    if (kind_ == ModelKind::grouped_checkerboard) {
      const std::vector<std::vector<std::size_t>> streams =
          grouped_checkerboard_streams(runner_->groups(), latents.header.latent_height, latents.header.latent_width);
      for (std::size_t k = 0; k < streams.size(); ++k)
        for (std::size_t n : streams[k]) encoder(1 + k).put(latents.symbols[n], gaussian_.tables[latents.indices[n]]);
    }
    // A checkerboard's anchors in stream 1, the other positions in stream 2, each in the latent's order.
    for (std::size_t n = 0; n < latents.symbols.size() && kind_ == ModelKind::checkerboard; ++n)
      encoder(is_anchor(n, latent_plane, latents.header.latent_width) ? 1 : 2)
          .put(latents.symbols[n], gaussian_.tables[latents.indices[n]]);
    // An autoregressive latent in its coding order: the wavefront's steps, each position's channels.
    if (kind_ == ModelKind::autoregressive)
      for (const std::vector<std::int64_t>& positions :
           codec::wavefront_steps(latents.header.latent_height, latents.header.latent_width, autoregressive_->slope()))
        for (std::int64_t p : positions)
          for (std::size_t c = 0; c < latents.header.channels; ++c) {
            const std::size_t n = c * latent_plane + static_cast<std::size_t>(p);
            encoder(1).put(latents.symbols[n], gaussian_.tables[latents.indices[n]]);
          }
  }
  if (!sectioned) return write_bitstream(latents.header, encoders[0].finish());
  std::vector<CodedStream> coded;
  if (hyperprior)
    coded.push_back({latents.header.hyper_channels, latents.header.hyper_height, latents.header.hyper_width, {}});
  for (std::uint32_t channels : hyperprior ? group_channels_ : std::vector<std::uint32_t>{latents.header.channels})
    coded.push_back({channels, latents.header.latent_height, latents.header.latent_width, {}});
  // Each stream is coded on its own, so on a thread of its own (the bytes do not depend on it).
  parallel_for(static_cast<std::int64_t>(coded.size()), [&](std::int64_t k) {
    coded[static_cast<std::size_t>(k)].bytes = encoders[static_cast<std::size_t>(k)].finish();
  });
  latents.header.icc_profile = image.icc_profile;
  return write_sectioned_bitstream(latents.header, coded);
}

CodecModel::Latents CodecModel::decode_latents(const std::uint8_t* bytes, std::size_t size) {
  BitstreamExpectation expected;
  expected.kind = kind_;
  expected.fingerprint = fingerprint_;
  expected.model = name_;
  expected.channels = static_cast<std::uint32_t>(latent_channels_);
  expected.stride = static_cast<std::uint32_t>(stride_);
  expected.latent_per_stride = static_cast<std::uint32_t>(latent_per_stride_);
  expected.hyper_channels = has_hyper_latent(kind_) ? static_cast<std::uint32_t>(tables_.channels()) : 0;
  expected.rate_levels = static_cast<std::uint32_t>(rate_levels_);
  expected.max_pixels = max_pixels_;
  expected.codec_fingerprint = codec_fingerprint_;
  expected.group_channels = group_channels_;
  const Bitstream file = parse_bitstream(bytes, size, expected);
  check_memory(file.header.width, file.header.height, true, size);
  Latents latents;
  latents.header = file.header;
  const BitstreamHeader& header = file.header;
  // One decoder per coded stream (version 5: the hyper-latent's, then each group's), or one for all.
  std::vector<codec::RansDecoder> decoders;
  for (const StreamView& stream : file.streams) decoders.emplace_back(stream.data, stream.size);
  auto decoder_of = [&](std::size_t stream) -> codec::RansDecoder& {
    return decoders[std::min(stream, decoders.size() - 1)];
  };
  codec::RansDecoder& decoder = decoders[0];
  // The factorized part: the latent, or the hyper-latent.
  const bool hyperprior = has_hyper_latent(kind_);
  const Shape factorized_shape = hyperprior ? Shape{1, header.hyper_channels, header.hyper_height, header.hyper_width}
                                            : Shape{1, header.channels, header.latent_height, header.latent_width};
  Tensor factorized(factorized_shape);
  float* values = factorized.data<float>();
  const std::int64_t plane = factorized_shape[2] * factorized_shape[3];
  std::vector<std::int32_t> integers(static_cast<std::size_t>(factorized.numel()));
  for (std::int64_t c = 0; c < factorized_shape[1]; ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int64_t median = tables_.medians[c];
    for (std::int64_t i = 0; i < plane; ++i) {
      const std::int64_t v = static_cast<std::int64_t>(decoder.get(table)) + median;
      values[c * plane + i] = static_cast<float>(v);
      // An escaped hyper-latent beyond 32 bits is clamped by the integer network anyway.
      integers[c * plane + i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(
          v, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
    }
  }
  if (!hyperprior) {
    decoder.finish();
    latents.latent = factorized;
    return latents;
  }
  latents.hyper_latent = factorized;
  code_groups(integers, latents,
              [&](std::size_t group, const std::vector<std::size_t>&, const codec::IntegerOutputs& outputs) {
                codec::RansDecoder& stream = decoder_of(1 + group);
                std::vector<std::int32_t> symbols(outputs.indices.size());
                for (std::size_t n = 0; n < symbols.size(); ++n)
                  symbols[n] = stream.get(gaussian_.tables[outputs.indices[n]]);
                return symbols;
              });
  for (const codec::RansDecoder& each : decoders) each.finish();
  return latents;
}

Tensor CodecModel::decode_latent(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header_out) {
  Latents latents = decode_latents(bytes, size);
  if (header_out) *header_out = latents.header;
  return latents.latent;
}

std::uint64_t CodecModel::max_file_bytes() const {
  const std::uint64_t stride = static_cast<std::uint64_t>(stride_);
  const std::uint64_t positions = max_pixels_ / (stride * stride) + 2 * kMaxImageSide / stride + 1;
  // An escaped symbol: at most 16 + 3 + 32 bits, so under 8 bytes; the
  // sections of version 5 add their headers and each stream's final state.
  const std::uint64_t sections =
      kSectionedHeaderBytes + 4 + (group_channels_.size() + 1) * (kSectionHeaderBytes + kStreamSectionHeaderBytes + 8);
  if (!has_hyper_latent(kind_)) return sections + 8 * static_cast<std::uint64_t>(latent_channels_) * positions;
  const std::uint64_t per_position =
      static_cast<std::uint64_t>(tables_.channels()) +
      static_cast<std::uint64_t>(latent_channels_) * latent_per_stride_ * latent_per_stride_;
  return sections + kHyperpriorOverheadBytes + 8 * per_position * positions;
}

namespace {
// The process's resident memory in bytes (Linux's /proc/self/statm; 0
// elsewhere): the libraries (about 9 MB in plexus-ae built for the CPU,
// 13 MB with CUDA, whose cuBLAS is opened by a CUDA context only), which a
// bound on the whole process must count.
std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// Taken as the library loads, before the program's own work: the same in
// every program linking the same libraries, whatever it did before coding.
const std::uint64_t kResidentAtLoad = resident_bytes();

// Estimates of what coding holds besides the bands (calibrated against
// /usr/bin/time -v on the shipped models, docs/performance.md): bytes per
// latent element while its symbols, indices, means and the integer
// network's values are live, and what a process holds before any image
// (the libraries, the allocator's arenas and what the heap keeps beyond its
// top: plexus-ae's M_TOP_PAD) beside twice the weights.
constexpr std::uint64_t kCodingBytesPerLatentElement = 40;
constexpr std::uint64_t kProcessBytes = std::uint64_t(64) << 20;
// What the heap keeps beside the process's resident memory before the model
// (kProcessBytes less a CPU-only plexus-ae's 8 MiB of libraries).
constexpr std::uint64_t kHeapBytes = std::uint64_t(56) << 20;
// What a band holds at its peak, for `activations` bytes of its blobs
// (BandedTransform::pass_bytes): a third more for a synthesis in several
// bands, measured on a 12-megapixel photo (the heap gives a band's pages back
// only in part before the next band, whose blocks then grow beside them).
std::uint64_t band_estimate(std::uint64_t activations, bool synthesis_in_bands) {
  return synthesis_in_bands ? activations + activations / 3 : activations;
}

std::string bytes_text(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}
}  // namespace

std::string CodecModel::banded_whole_reason(bool synthesis) const {
  if (!device_.is_cpu()) return "bands run on the CPU only";
  return (synthesis ? banded_synthesis_ : banded_analysis_)->whole_reason();
}

std::int64_t CodecModel::band_rows(BandedTransform& transform, const Shape& shape, bool decoding) {
  if (band_rows_ > 0) return band_rows_;
  if (!device_.is_cpu() || !transform.whole_reason().empty()) return shape[2];
  std::uint64_t budget = kDefaultBandBytes;
  if (max_memory_ > 0) {
    // What the bound leaves the band beside the model, the transform's image and latent and its threads' scratch.
    const std::int64_t scale = decoding ? banded_synthesis_->blob_row(kReconstruction, 1) : 1;
    const CodingMemory held = memory_needed(shape[3] * scale, shape[2] * scale, decoding, 0, /*fixed_only=*/true);
    const std::uint64_t beside = held.model + held.transform + scratch_bytes(transform, shape);
    budget = max_memory_ > beside ? max_memory_ - beside : 0;
  }
  // The largest step (a multiple of the alignment) whose tallest band fits the budget.
  const std::int64_t unit = transform.alignment(shape), steps = ceil_div(shape[2], unit);
  std::int64_t low = 1, high = steps;
  while (low < high) {
    const std::int64_t mid = (low + high + 1) / 2;
    const std::uint64_t activations = band_bytes(transform, shape, mid * unit);
    if ((max_memory_ > 0 ? band_estimate(activations, decoding && mid * unit < shape[2]) : activations) <= budget)
      low = mid;
    else high = mid - 1;
  }
  return low * unit;
}

std::uint64_t CodecModel::band_bytes(BandedTransform& transform, const Shape& shape, std::int64_t rows) {
  std::int64_t tallest = 0;
  for (const BandedTransform::Band& band : transform.plan(shape, rows))
    tallest = std::max(tallest, band.input.end - band.input.first);
  Shape band_shape = shape;
  band_shape[2] = tallest;
  const std::uint64_t bytes = transform.pass_bytes(band_shape);
  transform.reshape(shape);
  return bytes;
}

std::uint64_t CodecModel::scratch_bytes(BandedTransform& transform, const Shape& shape) {
  const std::uint64_t bytes = transform.scratch_bytes_per_thread(shape) * static_cast<std::uint64_t>(cpu_threads());
  transform.reshape(shape);
  return bytes;
}

CodingMemory CodecModel::memory_needed(std::int64_t width, std::int64_t height, bool decoding, std::uint64_t file_bytes,
                                       bool fixed_only) {
  const std::int64_t padded_width = (width + stride_ - 1) / stride_ * stride_;
  const std::int64_t padded_height = (height + stride_ - 1) / stride_ * stride_;
  const std::uint64_t pixels = static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height);
  const std::uint64_t latent_elements = static_cast<std::uint64_t>(latent_channels_) * (padded_height / stride_) *
                                        (padded_width / stride_) * latent_per_stride_ * latent_per_stride_;
  CodingMemory memory;
  // The model: its nets and, for a hyperprior, the integer network.
  memory.model = std::max(kProcessBytes, kResidentAtLoad + kHeapBytes) + 2 * weight_bytes_;
  // The entropy coding: the latent (and y_hat beside y), the coding state, and the file
  // being read, or the image being compressed (its caller holds it) and the file being written.
  memory.coding = 8 * latent_elements + (has_hyper_latent(kind_) ? kCodingBytesPerLatentElement * latent_elements : 0) +
                  // an autoregressive model's tensors held for the coding loop, at every latent position
                  (autoregressive_ ? autoregressive_->bytes_per_position() * latent_elements /
                                         static_cast<std::uint64_t>(std::max<std::int64_t>(latent_channels_, 1))
                                   : 0) +
                  (decoding ? file_bytes : 3 * pixels + 2 * latent_elements);
  // The transform: the image it reads or writes and the latent it writes or reads, beside the band.
  memory.transform = 3 * pixels + 4 * latent_elements;
  if (fixed_only) return memory;
  BandedTransform& transform = decoding ? *banded_synthesis_ : *banded_analysis_;
  const Shape shape = decoding ? Shape{1, latent_channels_, padded_height / stride_ * latent_per_stride_,
                                       padded_width / stride_ * latent_per_stride_}
                               : Shape{1, 3, padded_height, padded_width};
  memory.band_rows = band_rows(transform, shape, decoding);
  memory.per_band =
      band_estimate(band_bytes(transform, shape, memory.band_rows), decoding && memory.band_rows < shape[2]) +
      scratch_bytes(transform, shape);
  return memory;
}

void CodecModel::check_memory(std::int64_t width, std::int64_t height, bool decoding, std::uint64_t file_bytes) {
  if (max_memory_ == 0) return;
  const CodingMemory memory = memory_needed(width, height, decoding, file_bytes);
  if (memory.total() <= max_memory_) return;
  throw Error("cannot " + std::string(decoding ? "decompress" : "compress") + " a " + std::to_string(width) + "x" +
              std::to_string(height) + " image within --max-memory " + bytes_text(max_memory_) + ": it needs about " +
              bytes_text(memory.total()) + " (" + bytes_text(memory.model) + " for the model, and the larger of " +
              bytes_text(memory.coding) + " for the entropy coding and " +
              bytes_text(memory.transform + memory.per_band) + " for the transform, " + bytes_text(memory.per_band) +
              " of it for the " + (transform_whole(decoding) ? std::string("whole image") : "smallest band of rows") +
              ")");
}

bool CodecModel::transform_whole(bool decoding) const { return !banded_whole_reason(decoding).empty(); }

data::Image CodecModel::synthesize(const Tensor& latent, std::uint32_t rate_level, int width, int height) {
  const std::vector<BandedTransform::Band> bands =
      banded_synthesis_->plan(latent.shape(), band_rows(*banded_synthesis_, latent.shape(), true));
  const Shape& shape = synthesis_->blob_shape(kReconstruction);  // of the whole latent (plan leaves it so)
  if (shape.size() != 4 || shape[1] != 3 || shape[2] < height || shape[3] < width)
    throw ShapeError(name_ + ": the synthesis gives \"x_hat\" " + shape_str(shape) + ", too small for a " +
                     std::to_string(width) + "x" + std::to_string(height) + " image");
  data::Image image(width, height);
  const std::int64_t latent_rows = latent.dim(2), latent_width = latent.dim(3);
  for (std::size_t k = 0; k < bands.size(); ++k) {
    const BandedTransform::Band& band = bands[k];
    const std::int64_t rows = band.input.end - band.input.first;
    const Shape band_shape{1, latent.dim(1), rows, latent_width};
    banded_synthesis_->reshape(band_shape);
    if (rows == latent_rows) {
      synthesis_->input(synthesis_input_).copy_from(latent);
    } else {
      Tensor input(band_shape);
      copy_rows(latent, band.input.first, input, 0, rows);
      synthesis_->input(synthesis_input_).copy_from(input);
    }
    banded_synthesis_->set_origins(band.input.first);
    codec::set_rate_level(*ctx_, *synthesis_, rate_level / double(kRateLevelOne));
    synthesis_->forward(*ctx_);
    const Tensor& value = synthesis_->blob(kReconstruction);
    const Tensor host = device_.is_cpu() ? Tensor() : value.to(Device::cpu());
    const Tensor& x_hat = device_.is_cpu() ? value : host;
    // The rows this band gives, as data::tensor_to_image and crop_top_left make them.
    const std::int64_t offset = banded_synthesis_->blob_row(kReconstruction, band.input.first);
    const std::size_t plane = static_cast<std::size_t>(x_hat.dim(2)) * x_hat.dim(3);
    const float* in = x_hat.data<float>();
    for (std::int64_t y = band.output.first; y < std::min<std::int64_t>(band.output.end, height); ++y)
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c) {
          float v = in[c * plane + static_cast<std::size_t>(y - offset) * x_hat.dim(3) + x];
          v = std::isnan(v) ? 0.0f : std::min(1.0f, std::max(0.0f, v));
          image.at(static_cast<int>(y), x, c) = static_cast<std::uint8_t>(std::lround(v * 255.0f));
        }
    if (progress_) progress_((k + 1.0) / bands.size());
  }
  return image;
}

data::Image CodecModel::decompress(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header_out) {
  BitstreamHeader header;
  const Tensor latent = decode_latent(bytes, size, &header);
  if (header_out) *header_out = header;
  data::Image image =
      synthesize(latent, header.rate_level, static_cast<int>(header.width), static_cast<int>(header.height));
  image.icc_profile = std::move(header.icc_profile);
  if (header_out) header_out->icc_profile = image.icc_profile;
  return image;
}

bool add_coding_tables(TensorFile& file, const ModelSpec& spec, const Registry& registry,
                       const std::vector<data::Image>& calibration_images, bool recalibrate) {
  bool has_entropy_model = false;
  for (const NodeSpec& node : spec.nodes) has_entropy_model |= node.type == kEntropyModelType;
  if (!has_entropy_model) return false;
  CodecGraph graph = split_for_coding(spec);
  const std::int64_t channels = latent_channels(file, graph, spec.source);
  const codec::FactorizedCodingTables tables = build_tables(file, graph, registry, channels, spec.source);
  codec::store_coding_tables(tables, codec::coding_tables_prefix(graph.entropy_node), file);
  file.metadata.erase(kFingerprintMetadataKey);  // new tables, so a new fingerprint (export records it)
  file.metadata[kTablesMetadataKey] = nlohmann::json{
      {"coder", "rANS"},
      {"precision_bits", codec::kPrecisionBits},
      {"tail_mass",
       codec::kDefaultTailMass}}.dump();
  if (!has_hyper_latent(graph.kind)) return true;
  const std::string prefix = integer_network_prefix(graph.gaussian_node);
  if (calibration_images.empty() && !recalibrate && has_calibration(file, prefix)) return true;
  if (!graph.parameter_blobs.rounded.empty())
    graph.parameter_blobs.rounded_channels = probe_hyperprior_geometry(graph, spec, registry).analysed_channels;
  const codec::FloatNetwork network = float_entropy_parameters(spec.nodes, graph.parameter_blobs, file, spec.source);
  IntegerNetworkCalibration calibration;
  std::string source;
  if (calibration_images.empty()) {
    source = calibrate_on_prior(network, tables, calibration);
  } else {
    // The hyper-latents (and latents) of the images, from the model's own analysis on the CPU.
    CodecModel model(spec, file, registry, Device::cpu(), spec.source);
    std::vector<CalibrationSample> samples;
    // A variable-rate model's hyper-latents differ by level: each image at every whole level.
    const int levels = std::max(1, model.rate_levels());
    for (const data::Image& image : calibration_images)
      for (int level = 0; level < levels; ++level) {
        if (model.rate_levels() > 0) model.set_rate_level(level);
        const CodecModel::Latents latents = model.analyse(image);
        const Tensor& z = latents.hyper_latent;
        CalibrationSample sample{latent_integers(z, "hyper-latent"), z.dim(2), z.dim(3), {}};
        if (!graph.parameter_blobs.rounded.empty())
          sample.latent.assign(latents.latent.data<float>(), latents.latent.data<float>() + latents.latent.numel());
        samples.push_back(std::move(sample));
      }
    calibration = calibrate(network, samples);
    source = std::to_string(calibration_images.size()) + " image(s)" +
             (levels > 1 ? " at each of " + std::to_string(levels) + " rate levels" : "");
  }
  integer_entropy_parameters(network, calibration, spec.source);  // refuses a calibration that cannot be used
  store_calibration(calibration, prefix, file);
  file.metadata[kIntegerMetadataKey] =
      nlohmann::json{{"calibration", source}, {"weight_bits", 16}, {"activation_bits", 15}}.dump();
  return true;
}

std::optional<std::string> why_not_codable(const ModelSpec& spec, const Registry& registry) {
  try {
    check_contract(spec);
    derive_stride(spec, registry);
    const CodecGraph graph = split_for_coding(spec);
    if (!has_hyper_latent(graph.kind)) return std::nullopt;
    probe_hyperprior_geometry(graph, spec, registry);  // in CodecModel's order: the geometry, then the parameters
    if (auto problem = entropy_parameters_problem(spec.nodes, graph.parameter_blobs)) return problem;
  } catch (const NotCodable& e) {
    return e.reason();
  } catch (const ConfigError& e) {
    return std::string(e.what());
  } catch (const ShapeError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

void write_coding_tables(const std::string& path, const Registry& registry) {
  // The model itself is already written: whatever goes wrong here only
  // leaves it without tables (they are computed again when it is loaded).
  try {
    TensorFile file = load_safetensors(path);
    if (!add_coding_tables(file, spec_from_checkpoint(file, path), registry)) return;
    save_safetensors(path, file);
  } catch (const Error& e) {
    spdlog::warn("'{}' was written without coding tables: {}", path, e.what());
  }
}

}  // namespace plexus::codec

#include "plexus/codec/codec_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "factorized_entropy_model/factorized_entropy_model.h"
#include "codec_graph.h"
#include "hyperprior_coding.h"
#include "model_fingerprint.h"
#include "plexus/checksum.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"

namespace plexus::ae {

namespace {

constexpr const char* kTablesMetadataKey = "plexus_ae.coding_tables";
constexpr const char* kIntegerMetadataKey = "plexus_ae.integer_hyper_synthesis";
// Calibration without images: this many hyper-latents of side kPriorSide from the prior.
constexpr int kPriorSamples = 8;
constexpr int kPriorSide = 6;

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

codec::FactorizedCodingTables build_tables(const TensorFile& file, const CodecGraph& graph,
                                            const Registry& registry, std::int64_t channels,
                                            const std::string& who) {
  Net density(graph.density, registry, {{graph.factorized_latent, Shape{1, channels, 1, 1}}}, DType::f64);
  load_weights(density, file, who);
  const auto* model = dynamic_cast<const layers::FactorizedEntropyModel*>(&density.layer(graph.entropy_node));
  if (!model)
    throw ConfigError(graph.density.source + ": node '" + graph.entropy_node + "' is not the built-in " +
                      kEntropyModelType);
  return codec::build_coding_tables(*model);
}


// The calibration of the entropy parameters on `hyper_latents` ([C, height, width] each, sizes given).
IntegerNetworkCalibration calibrate(const codec::FloatNetwork& network,
                                    const std::vector<std::vector<std::int32_t>>& hyper_latents,
                                    const std::vector<std::pair<std::int64_t, std::int64_t>>& sizes) {
  IntegerNetworkCalibration calibration;
  for (std::size_t n = 0; n < hyper_latents.size(); ++n)
    codec::float_forward(network, hyper_latents[n], sizes[n].first, sizes[n].second, &calibration.ranges);
  calibration.scale_table = codec::log_scale_table();
  return calibration;
}

IntegerNetworkCalibration calibrate_on_prior(const codec::FloatNetwork& network,
                                             const codec::FactorizedCodingTables& tables) {
  return calibrate(network, prior_samples(tables, kPriorSamples, kPriorSide),
                   std::vector<std::pair<std::int64_t, std::int64_t>>(kPriorSamples, {kPriorSide, kPriorSide}));
}

// Refuses a latent with a value that is not finite or of magnitude >= 2^30:
// 2^30 keeps every symbol (round(v) - m, round(v - mean)) within 32 bits;
// a finite latent of a real image is far smaller.
void check_latent_values(const Tensor& latent, const char* what) {
  const float* values = latent.data<float>();
  const std::int64_t count = latent.numel(), plane = latent.dim(2) * latent.dim(3);
  for (std::int64_t n = 0; n < count; ++n)
    if (!(std::fabs(values[n]) < float(1 << 30)))
      throw Error(std::string("cannot compress: the ") + what + " holds " + std::to_string(values[n]) +
                  " at channel " + std::to_string(n / plane) +
                  " (not a finite value of magnitude < 2^30; is the model trained?)");
}

// The integers of a latent tensor (rounded values of magnitude < 2^30).
std::vector<std::int32_t> latent_integers(const Tensor& latent, const char* what) {
  check_latent_values(latent, what);
  const float* values = latent.data<float>();
  std::vector<std::int32_t> integers(static_cast<std::size_t>(latent.numel()));
  for (std::size_t n = 0; n < integers.size(); ++n) integers[n] = static_cast<std::int32_t>(std::llround(values[n]));
  return integers;
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
  const TensorFile file = load_safetensors(path);
  return std::make_unique<CodecModel>(spec_from_checkpoint(file, path, registry), file, registry, device, path);
}

CodecModel::CodecModel(const ModelSpec& spec, const TensorFile& file, const Registry& registry, Device device,
                       std::string name)
    : name_(std::move(name)), device_(device) {
  check_contract(spec);
  stride_ = derive_stride(spec, registry);
  const CodecGraph graph = split_for_coding(spec);
  kind_ = graph.kind;
  latent_ = graph.latent;
  synthesis_input_ = graph.synthesis_input;
  analysed_latent_ = analysed_latent(graph);
  hyper_latent_ = graph.hyper_latent;
  if (has_hyper_latent(kind_)) probe_hyperprior_stride(graph, spec, registry);
  const std::int64_t factorized_channels = build_transforms(graph, spec, file, registry);
  const auto start = std::chrono::steady_clock::now();
  load_tables(graph, spec, file, registry, factorized_channels);
  if (computed_tables_)
    spdlog::info("'{}' has no coding tables{}; computed them in {:.0f} ms ('plexus-ae export --model {}' stores them "
                 "in the file)",
                 name_, has_hyper_latent(kind_) ? " or calibrated integer network" : "",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(), name_);
  fingerprint_ = compute_fingerprint(spec);
  ctx_ = std::make_unique<Context>(device, 0);
  ctx_->set_training(false);
}

void CodecModel::probe_hyperprior_stride(const CodecGraph& graph, const ModelSpec& spec, const Registry& registry) {
  const HyperpriorGeometry geometry = probe_hyperprior_geometry(graph, spec, registry);
  latent_per_stride_ = geometry.latent_per_stride;
  stride_ = geometry.stride;
}

// The analysis and synthesis nets with the file's weights, shaped for one
// stride-sized image; returns the channels the factorized tables cover.
std::int64_t CodecModel::build_transforms(const CodecGraph& graph, const ModelSpec& spec, const TensorFile& file,
                                          const Registry& registry) {
  analysis_shape_ = {1, 3, stride_, stride_};
  analysis_ = std::make_unique<Net>(graph.analysis, registry, std::map<std::string, Shape>{{kImage, analysis_shape_}},
                                    DType::f32, device_);
  load_weights(*analysis_, file, name_);
  const Shape& latent_shape = analysis_->blob(analysed_latent_).shape();
  if (latent_shape.size() != 4 || latent_shape[2] != latent_per_stride_ || latent_shape[3] != latent_per_stride_)
    throw ConfigError(spec.source + " cannot be used as a codec: a " + std::to_string(stride_) + "x" +
                      std::to_string(stride_) + " image gives a latent '" + latent_ + "' of " +
                      shape_str(latent_shape) + ", not [1, C, " + std::to_string(latent_per_stride_) + ", " +
                      std::to_string(latent_per_stride_) + "]");
  latent_channels_ = latent_shape[1];
  std::int64_t factorized_channels = latent_channels_;
  if (has_hyper_latent(kind_)) {
    const Shape& z = analysis_->blob(hyper_latent_).shape();
    if (z.size() != 4 || z[2] != 1 || z[3] != 1)
      throw ConfigError(spec.source + " cannot be used as a codec: a " + std::to_string(stride_) + "x" +
                        std::to_string(stride_) + " image gives a hyper-latent '" + hyper_latent_ + "' of " +
                        shape_str(z) + ", not [1, Cz, 1, 1]");
    factorized_channels = z[1];
  }
  synthesis_shape_ = latent_shape;
  synthesis_ = std::make_unique<Net>(graph.synthesis, registry,
                                     std::map<std::string, Shape>{{synthesis_input_, latent_shape}},
                                     DType::f32, device_);
  load_weights(*synthesis_, file, name_);
  // Only ever run forward: each holds just what the codec reads, not every activation.
  std::vector<std::string> kept{analysed_latent_};
  if (has_hyper_latent(kind_)) kept.push_back(hyper_latent_);
  analysis_->set_inference_only(kept);
  synthesis_->set_inference_only({kReconstruction});
  return factorized_channels;
}

// The factorized tables and, for a hyperprior, the integer network and
// Gaussian tables: from the file, or computed (and computed_tables_ set)
// when it has none.
void CodecModel::load_tables(const CodecGraph& graph, const ModelSpec& spec, const TensorFile& file,
                             const Registry& registry, std::int64_t factorized_channels) {
  const std::string prefix = codec::coding_tables_prefix(graph.entropy_node);
  if (codec::has_coding_tables(file, prefix)) {
    tables_ = codec::load_coding_tables(file, prefix, factorized_channels, "'" + name_ + "'");
  } else {
    tables_ = build_tables(file, graph, registry, factorized_channels, name_);
    computed_tables_ = true;
  }
  if (!has_hyper_latent(kind_)) return;
  float_network_ = ae::float_entropy_parameters(spec.nodes, graph.parameter_blobs, file, "'" + name_ + "'");
  const std::string integer_prefix = integer_network_prefix(graph.gaussian_node);
  IntegerNetworkCalibration calibration;
  if (has_calibration(file, integer_prefix)) {
    calibration = load_calibration(file, integer_prefix, float_network_, "'" + name_ + "'");
  } else {
    calibration = calibrate_on_prior(float_network_, tables_);
    computed_tables_ = true;
  }
  integer_network_ = ae::integer_entropy_parameters(float_network_, calibration, "'" + name_ + "'");
  // One hyper-latent position, run through the network, checks every size (the means' too).
  const Shape scales =
      integer_network_.in_channels != factorized_channels
          ? Shape{}
          : codec::run_network(integer_network_, std::vector<std::int32_t>(static_cast<std::size_t>(factorized_channels)),
                               1, 1)
                .shape;
  if (scales != Shape{latent_channels_, latent_per_stride_, latent_per_stride_})
    throw ConfigError(spec.source + " cannot be used as a codec: its entropy parameters map [" +
                      std::to_string(integer_network_.in_channels) + ", 1, 1] to " + shape_str(scales) +
                      ", but the hyper-latent has " + std::to_string(factorized_channels) +
                      " channels and the latent per hyper-latent position is [" + std::to_string(latent_channels_) +
                      ", " + std::to_string(latent_per_stride_) + ", " + std::to_string(latent_per_stride_) + "]");
  gaussian_ = codec::build_gaussian_tables(calibration.scale_table);
}

std::uint64_t CodecModel::compute_fingerprint(const ModelSpec& spec) {
  plexus::Fnv1a64 hash;
  hash.add_field("plexus-ae codec model");
  hash.add_field(spec.to_json().dump());
  std::map<std::string, const Tensor*> weights;  // sorted by name
  for (Net* net : {analysis_.get(), synthesis_.get()})
    for (const NamedParameter& named : net->parameters()) weights[named.name] = &named.parameter->value;
  for (const auto& [weight_name, tensor] : weights) hash_tensor(hash, weight_name, *tensor);
  for (std::int64_t c = 0; c < tables_.channels(); ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int32_t fields[] = {tables_.medians[c], table.min, static_cast<std::int32_t>(table.cdf.size())};
    hash.add(fields, sizeof fields);
    hash.add(table.cdf.data(), table.cdf.size() * sizeof(table.cdf[0]));
  }
  if (has_hyper_latent(kind_)) hash_hyperprior(hash, integer_network_, gaussian_);
  return hash.value();
}

CodecModel::~CodecModel() = default;

CodecModel::Latents CodecModel::analyse(const data::Image& image) {
  if (image.width < 1 || image.height < 1 || static_cast<std::uint32_t>(image.width) > kMaxImageSide ||
      static_cast<std::uint32_t>(image.height) > kMaxImageSide ||
      static_cast<std::uint64_t>(image.width) * image.height > max_pixels_)
    throw ConfigError("a " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                      " image is outside what the format holds (each side 1.." + std::to_string(kMaxImageSide) +
                      ", at most " + std::to_string(max_pixels_) + " pixels)");
  const int padded_width = (image.width + stride_ - 1) / stride_ * stride_;
  const int padded_height = (image.height + stride_ - 1) / stride_ * stride_;
  const Shape shape{1, 3, padded_height, padded_width};
  if (shape != analysis_shape_) {
    analysis_->reshape({{kImage, shape}});
    analysis_shape_ = shape;
  }
  analysis_->input(kImage).copy_from(data::image_to_tensor(data::pad_replicate(image, padded_width, padded_height)));
  analysis_->forward(*ctx_);
  Latents latents;
  auto host = [&](const std::string& blob) {
    const Tensor& value = analysis_->blob(blob);
    return device_.is_cpu() ? value.clone() : value.to(Device::cpu());
  };
  latents.latent = host(analysed_latent_);
  if (has_hyper_latent(kind_)) latents.hyper_latent = host(hyper_latent_);
  BitstreamHeader& header = latents.header;
  header.kind = kind_;
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
  return latents;
}

CodecModel::Latents CodecModel::encode_latents(const data::Image& image) {
  Latents latents = analyse(image);
  if (!has_hyper_latent(kind_)) return latents;
  codec::IntegerOutputs outputs =
      codec::run_network(integer_network_, latent_integers(latents.hyper_latent, "hyper-latent"),
                         latents.hyper_latent.dim(2), latents.hyper_latent.dim(3), device_);
  latents.indices = std::move(outputs.indices);
  if (kind_ == ModelKind::hyperprior) {
    latents.symbols = latent_integers(latents.latent, "latent");
    return latents;
  }
  // Mean-scale: the symbol round(y - mean), and y_hat = symbol + mean as the decoder will compute it.
  latents.means = std::move(outputs.means);
  check_latent_values(latents.latent, "latent");
  float* y = latents.latent.data<float>();
  latents.symbols.resize(latents.means.size());
  for (std::size_t n = 0; n < latents.means.size(); ++n) {
    latents.symbols[n] = static_cast<std::int32_t>(std::round(double(y[n]) - mean_value(latents.means[n])));
    y[n] = reconstruct(latents.symbols[n], latents.means[n]);
  }
  return latents;
}

Tensor CodecModel::encode_latent(const data::Image& image) { return encode_latents(image).latent; }

std::vector<std::uint8_t> CodecModel::compress(const data::Image& image, bool grey) {
  Latents latents = encode_latents(image);
  latents.header.grey = grey;
  codec::RansEncoder encoder;
  // The factorized symbols s = v - m_c, channel by channel: the latent, or a hyperprior's hyper-latent.
  const bool hyperprior = has_hyper_latent(kind_);
  const Tensor& factorized = hyperprior ? latents.hyper_latent : latents.latent;
  const std::vector<std::int32_t> values = latent_integers(factorized, hyperprior ? "hyper-latent" : "latent");
  const std::int64_t plane = factorized.dim(2) * factorized.dim(3);
  for (std::size_t n = 0; n < values.size(); ++n) {
    const std::int64_t c = static_cast<std::int64_t>(n) / plane;
    encoder.put(static_cast<std::int32_t>(values[n] - static_cast<std::int64_t>(tables_.medians[c])), tables_.tables[c]);
  }
  if (hyperprior) {
    // Then the latent's symbols (y_hat, or round(y - mean)), each with the Gaussian table of its index.
    for (std::size_t n = 0; n < latents.symbols.size(); ++n)
      encoder.put(latents.symbols[n], gaussian_.tables[latents.indices[n]]);
  }
  return write_bitstream(latents.header, encoder.finish());
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
  expected.max_pixels = max_pixels_;
  const Bitstream file = parse_bitstream(bytes, size, expected);
  Latents latents;
  latents.header = file.header;
  const BitstreamHeader& header = file.header;
  codec::RansDecoder decoder(file.stream, file.stream_size);
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
      integers[c * plane + i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(v, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
    }
  }
  if (!hyperprior) {
    decoder.finish();
    latents.latent = factorized;
    return latents;
  }
  latents.hyper_latent = factorized;
  codec::IntegerOutputs outputs =
      codec::run_network(integer_network_, integers, header.hyper_height, header.hyper_width, device_);
  latents.indices = std::move(outputs.indices);
  latents.means = std::move(outputs.means);
  Tensor latent({1, static_cast<std::int64_t>(header.channels), header.latent_height, header.latent_width});
  float* y = latent.data<float>();
  latents.symbols.resize(latents.indices.size());
  for (std::size_t n = 0; n < latents.indices.size(); ++n) {
    latents.symbols[n] = decoder.get(gaussian_.tables[latents.indices[n]]);
    y[n] = latents.means.empty() ? static_cast<float>(latents.symbols[n])
                                 : reconstruct(latents.symbols[n], latents.means[n]);
  }
  decoder.finish();
  latents.latent = latent;
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
  // An escaped symbol: at most 16 + 3 + 32 bits, so under 8 bytes.
  if (!has_hyper_latent(kind_))
    return kBitstreamOverheadBytes + 8 * static_cast<std::uint64_t>(latent_channels_) * positions;
  const std::uint64_t per_position = static_cast<std::uint64_t>(tables_.channels()) +
                                     static_cast<std::uint64_t>(latent_channels_) * latent_per_stride_ * latent_per_stride_;
  return kHyperpriorOverheadBytes + 8 * per_position * positions;
}

Tensor CodecModel::synthesize(const Tensor& latent) {
  if (latent.shape() != synthesis_shape_) {
    synthesis_->reshape({{synthesis_input_, latent.shape()}});
    synthesis_shape_ = latent.shape();
  }
  synthesis_->input(synthesis_input_).copy_from(latent);
  synthesis_->forward(*ctx_);
  return synthesis_->blob(kReconstruction);
}

data::Image CodecModel::decompress(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header_out) {
  BitstreamHeader header;
  const Tensor latent = decode_latent(bytes, size, &header);
  if (header_out) *header_out = header;
  const Tensor& reconstruction = synthesize(latent);
  const Shape& shape = reconstruction.shape();
  if (shape.size() != 4 || shape[1] != 3 || shape[2] < static_cast<std::int64_t>(header.height) ||
      shape[3] < static_cast<std::int64_t>(header.width))
    throw ShapeError(name_ + ": the synthesis gives \"x_hat\" " + shape_str(shape) + ", too small for a " +
                     std::to_string(header.width) + "x" + std::to_string(header.height) + " image");
  return data::crop_top_left(data::tensor_to_image(reconstruction), static_cast<int>(header.width),
                             static_cast<int>(header.height));
}

bool add_coding_tables(TensorFile& file, const ModelSpec& spec, const Registry& registry,
                       const std::vector<data::Image>& calibration_images, bool recalibrate) {
  bool has_entropy_model = false;
  for (const NodeSpec& node : spec.nodes) has_entropy_model |= node.type == kEntropyModelType;
  if (!has_entropy_model) return false;
  const CodecGraph graph = split_for_coding(spec);
  const std::int64_t channels = latent_channels(file, graph, spec.source);
  const codec::FactorizedCodingTables tables = build_tables(file, graph, registry, channels, spec.source);
  codec::store_coding_tables(tables, codec::coding_tables_prefix(graph.entropy_node), file);
  file.metadata[kTablesMetadataKey] =
      nlohmann::json{{"coder", "rANS"}, {"precision_bits", codec::kPrecisionBits}, {"tail_mass", codec::kDefaultTailMass}}
          .dump();
  if (!has_hyper_latent(graph.kind)) return true;

  const std::string prefix = integer_network_prefix(graph.gaussian_node);
  if (calibration_images.empty() && !recalibrate && has_calibration(file, prefix)) return true;
  const codec::FloatNetwork network = float_entropy_parameters(spec.nodes, graph.parameter_blobs, file, spec.source);
  IntegerNetworkCalibration calibration;
  std::string source;
  if (calibration_images.empty()) {
    calibration = calibrate_on_prior(network, tables);
    source = std::to_string(kPriorSamples) + " hyper-latents of " + std::to_string(kPriorSide) + "x" +
             std::to_string(kPriorSide) + " sampled from the prior";
  } else {
    // The hyper-latents of the images, from the model's own analysis on the CPU.
    CodecModel model(spec, file, registry, Device::cpu(), spec.source);
    std::vector<std::vector<std::int32_t>> hyper_latents;
    std::vector<std::pair<std::int64_t, std::int64_t>> sizes;
    for (const data::Image& image : calibration_images) {
      const Tensor z = model.analyse(image).hyper_latent;
      hyper_latents.push_back(latent_integers(z, "hyper-latent"));
      sizes.emplace_back(z.dim(2), z.dim(3));
    }
    calibration = calibrate(network, hyper_latents, sizes);
    source = std::to_string(calibration_images.size()) + " image(s)";
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

}  // namespace plexus::ae

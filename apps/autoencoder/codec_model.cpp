#include "codec_model.h"

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "autoencoder_contract.h"
#include "plexus/codec/checksum.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"
#include "run_metadata.h"

namespace plexus::ae {

namespace {

constexpr const char* kEntropyModelType = "FactorizedEntropyModel";
constexpr const char* kTablesMetadataKey = "plexus_ae.coding_tables";
constexpr const char* kConditionalModelType = "GaussianConditional";

// The first GaussianConditional node of `spec` (a scale-hyperprior model), or null.
const NodeSpec* conditional_entropy_node(const ModelSpec& spec) {
  for (const NodeSpec& node : spec.nodes)
    if (node.type == kConditionalModelType) return &node;
  return nullptr;
}

// The model's graph cut at the latent: three sub-specs that run the parts
// of the model a codec needs, with the parameter names of the whole.
struct CodecGraph {
  std::string latent;
  ModelSpec analysis;   // "image" -> latent
  ModelSpec synthesis;  // latent -> "x_hat"
  ModelSpec density;    // latent -> the entropy model's likelihoods
  std::string entropy_node;
};

// The nodes of `spec` (in spec order) that compute `targets` from the blobs in `given`.
std::vector<NodeSpec> nodes_for(const ModelSpec& spec, const std::vector<std::string>& targets,
                                const std::set<std::string>& given, const std::string& what) {
  std::map<std::string, const NodeSpec*> producer;
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& output : node.outputs) producer[output] = &node;
  std::set<std::string> chosen, seen;
  std::vector<std::string> pending = targets;
  while (!pending.empty()) {
    const std::string blob = pending.back();
    pending.pop_back();
    if (given.count(blob) || !seen.insert(blob).second) continue;
    auto it = producer.find(blob);
    if (it == producer.end())
      throw ConfigError(spec.source + " cannot be used as a codec: its " + what + " needs '" + blob + "'" +
                        (blob == kImage ? ", so \"x_hat\" depends on the image other than through the latent"
                                        : ", which no node produces"));
    if (chosen.insert(it->second->name).second)
      pending.insert(pending.end(), it->second->inputs.begin(), it->second->inputs.end());
  }
  std::vector<NodeSpec> nodes;
  for (const NodeSpec& node : spec.nodes)
    if (chosen.count(node.name)) nodes.push_back(node);
  return nodes;
}

// Throws ConfigError when `spec` has no single FactorizedEntropyModel or
// its reconstruction needs more than the latent.
CodecGraph split_for_coding(const ModelSpec& spec) {
  std::vector<const NodeSpec*> entropy;
  for (const NodeSpec& node : spec.nodes)
    if (node.type == kEntropyModelType) entropy.push_back(&node);
  if (entropy.size() != 1 || entropy[0]->inputs.size() != 1)
    throw ConfigError(spec.source + " cannot be used as a codec: it needs exactly one " + kEntropyModelType +
                      " node (with one input, the latent), found " + std::to_string(entropy.size()));
  CodecGraph graph;
  graph.entropy_node = entropy[0]->name;
  graph.latent = entropy[0]->inputs[0];
  graph.analysis.name = spec.name + " analysis";
  graph.analysis.source = spec.source + " (analysis)";
  graph.analysis.inputs = {kImage};
  graph.analysis.nodes = nodes_for(spec, {graph.latent}, {kImage}, "analysis");
  graph.synthesis.name = spec.name + " synthesis";
  graph.synthesis.source = spec.source + " (synthesis)";
  graph.synthesis.inputs = {graph.latent};
  graph.synthesis.nodes = nodes_for(spec, {kReconstruction}, {graph.latent}, "synthesis");
  graph.density.source = spec.source + " (entropy model)";
  graph.density.inputs = {graph.latent};
  graph.density.nodes = {*entropy[0]};
  return graph;
}

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

layers::FactorizedCodingTables build_tables(const TensorFile& file, const CodecGraph& graph,
                                            const Registry& registry, std::int64_t channels,
                                            const std::string& who) {
  Net density(graph.density, registry, {{graph.latent, Shape{1, channels, 1, 1}}}, DType::f64);
  load_weights(density, file, who);
  const auto* model = dynamic_cast<const layers::FactorizedEntropyModel*>(&density.layer(graph.entropy_node));
  if (!model)
    throw ConfigError(graph.density.source + ": node '" + graph.entropy_node + "' is not the built-in " +
                      kEntropyModelType);
  return layers::build_coding_tables(*model);
}

void hash_tensor(codec::Fnv1a64& hash, const std::string& name, const Tensor& tensor) {
  hash.add_field(name);
  for (std::int64_t dim : tensor.shape()) hash.add(&dim, sizeof dim);
  const Tensor values = tensor.to(Device::cpu()).to(DType::f32);
  hash.add(values.raw_data(), values.nbytes());
}

}  // namespace

std::unique_ptr<CodecModel> CodecModel::from_file(const std::string& path, const Registry& registry, Device device) {
  const TensorFile file = load_safetensors(path);
  return std::make_unique<CodecModel>(spec_from_checkpoint(file, path), file, registry, device, path);
}

CodecModel::CodecModel(const ModelSpec& spec, const TensorFile& file, const Registry& registry, Device device,
                       std::string name)
    : name_(std::move(name)), device_(device) {
  check_contract(spec);
  if (const NodeSpec* conditional = conditional_entropy_node(spec))
    throw ConfigError(name_ + " (" + spec.source + ") is a scale-hyperprior model (" + kConditionalModelType +
                      " node '" + conditional->name +
                      "'); compress and decompress code factorized-prior models only so far");
  stride_ = derive_stride(spec, registry);
  const CodecGraph graph = split_for_coding(spec);
  latent_ = graph.latent;
  analysis_shape_ = {1, 3, stride_, stride_};
  analysis_ = std::make_unique<Net>(graph.analysis, registry, std::map<std::string, Shape>{{kImage, analysis_shape_}},
                                    DType::f32, device);
  load_weights(*analysis_, file, name_);
  const Shape& latent_shape = analysis_->blob(latent_).shape();
  if (latent_shape.size() != 4 || latent_shape[2] != 1 || latent_shape[3] != 1)
    throw ConfigError(spec.source + " cannot be used as a codec: a " + std::to_string(stride_) + "x" +
                      std::to_string(stride_) + " image gives a latent '" + latent_ + "' of " +
                      shape_str(latent_shape) + ", not [1, C, 1, 1]");
  const std::int64_t channels = latent_shape[1];
  synthesis_shape_ = latent_shape;
  synthesis_ = std::make_unique<Net>(graph.synthesis, registry, std::map<std::string, Shape>{{latent_, latent_shape}},
                                     DType::f32, device);
  load_weights(*synthesis_, file, name_);

  const std::string prefix = layers::coding_tables_prefix(graph.entropy_node);
  if (layers::has_coding_tables(file, prefix)) {
    tables_ = layers::load_coding_tables(file, prefix, channels, "'" + name_ + "'");
  } else {
    const auto start = std::chrono::steady_clock::now();
    tables_ = build_tables(file, graph, registry, channels, name_);
    computed_tables_ = true;
    spdlog::info("'{}' has no coding tables; computed them from its entropy model in {:.0f} ms "
                 "('plexus-ae export --model {}' stores them in the file)",
                 name_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                 name_);
  }

  codec::Fnv1a64 hash;
  hash.add_field("plexus-ae codec model");
  hash.add_field(spec.to_json().dump());
  std::map<std::string, const Tensor*> weights;  // sorted by name
  for (Net* net : {analysis_.get(), synthesis_.get()})
    for (const NamedParameter& named : net->parameters()) weights[named.name] = &named.parameter->value;
  for (const auto& [weight_name, tensor] : weights) hash_tensor(hash, weight_name, *tensor);
  for (std::int64_t c = 0; c < channels; ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int32_t fields[] = {tables_.medians[c], table.min, static_cast<std::int32_t>(table.cdf.size())};
    hash.add(fields, sizeof fields);
    hash.add(table.cdf.data(), table.cdf.size() * sizeof(table.cdf[0]));
  }
  fingerprint_ = hash.value();

  ctx_ = std::make_unique<Context>(device, 0);
  ctx_->set_training(false);
}

CodecModel::~CodecModel() = default;

Tensor CodecModel::encode_latent(const data::Image& image) {
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
  const Tensor& latent = analysis_->blob(latent_);
  return device_.is_cpu() ? latent.clone() : latent.to(Device::cpu());
}

std::vector<std::uint8_t> CodecModel::compress(const data::Image& image) {
  const Tensor latent = encode_latent(image);
  const Shape& shape = latent.shape();
  const std::int64_t channels = shape[1], plane = shape[2] * shape[3];
  const float* values = latent.data<float>();
  codec::RansEncoder encoder;
  for (std::int64_t c = 0; c < channels; ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int64_t median = tables_.medians[c];
    for (std::int64_t i = 0; i < plane; ++i) {
      const float v = values[c * plane + i];
      // 2^30 keeps s = round(v) - m within 32 bits; a finite latent of a real image is far smaller.
      if (!(std::fabs(v) < float(1 << 30)))
        throw Error("cannot compress: the latent holds " + std::to_string(v) + " at channel " + std::to_string(c) +
                    " (not a finite value of magnitude < 2^30; is the model trained?)");
      encoder.put(static_cast<std::int32_t>(std::llround(v) - median), table);
    }
  }
  BitstreamHeader header;
  header.fingerprint = fingerprint_;
  header.width = static_cast<std::uint32_t>(image.width);
  header.height = static_cast<std::uint32_t>(image.height);
  header.channels = static_cast<std::uint32_t>(channels);
  header.latent_height = static_cast<std::uint32_t>(shape[2]);
  header.latent_width = static_cast<std::uint32_t>(shape[3]);
  return write_bitstream(header, encoder.finish());
}

Tensor CodecModel::decode_latent(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header_out) {
  BitstreamExpectation expected;
  expected.fingerprint = fingerprint_;
  expected.model = name_;
  expected.channels = static_cast<std::uint32_t>(channels());
  expected.stride = static_cast<std::uint32_t>(stride_);
  expected.max_pixels = max_pixels_;
  const Bitstream file = parse_bitstream(bytes, size, expected);
  const BitstreamHeader& header = file.header;
  Tensor latent({1, static_cast<std::int64_t>(header.channels), header.latent_height, header.latent_width});
  float* values = latent.data<float>();
  const std::int64_t plane = static_cast<std::int64_t>(header.latent_height) * header.latent_width;
  codec::RansDecoder decoder(file.stream, file.stream_size);
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(header.channels); ++c) {
    const codec::CodingTable& table = tables_.tables[c];
    const std::int64_t median = tables_.medians[c];
    for (std::int64_t i = 0; i < plane; ++i)
      values[c * plane + i] = static_cast<float>(static_cast<std::int64_t>(decoder.get(table)) + median);
  }
  decoder.finish();
  if (header_out) *header_out = header;
  return latent;
}

std::uint64_t CodecModel::max_file_bytes() const {
  const std::uint64_t stride = static_cast<std::uint64_t>(stride_);
  const std::uint64_t positions = max_pixels_ / (stride * stride) + 2 * kMaxImageSide / stride + 1;
  // An escaped symbol: at most 16 + 3 + 32 bits, so under 8 bytes.
  return kBitstreamOverheadBytes + 8 * static_cast<std::uint64_t>(channels()) * positions;
}

Tensor CodecModel::synthesize(const Tensor& latent) {
  if (latent.shape() != synthesis_shape_) {
    synthesis_->reshape({{latent_, latent.shape()}});
    synthesis_shape_ = latent.shape();
  }
  synthesis_->input(latent_).copy_from(latent);
  synthesis_->forward(*ctx_);
  return synthesis_->blob(kReconstruction);
}

data::Image CodecModel::decompress(const std::uint8_t* bytes, std::size_t size) {
  BitstreamHeader header;
  const Tensor latent = decode_latent(bytes, size, &header);
  const Tensor& reconstruction = synthesize(latent);
  const Shape& shape = reconstruction.shape();
  if (shape.size() != 4 || shape[1] != 3 || shape[2] < static_cast<std::int64_t>(header.height) ||
      shape[3] < static_cast<std::int64_t>(header.width))
    throw ShapeError(name_ + ": the synthesis gives \"x_hat\" " + shape_str(shape) + ", too small for a " +
                     std::to_string(header.width) + "x" + std::to_string(header.height) + " image");
  return data::crop_top_left(data::tensor_to_image(reconstruction), static_cast<int>(header.width),
                             static_cast<int>(header.height));
}

bool has_conditional_entropy_model(const ModelSpec& spec) { return conditional_entropy_node(spec) != nullptr; }

bool add_coding_tables(TensorFile& file, const ModelSpec& spec, const Registry& registry) {
  bool has_entropy_model = false;
  for (const NodeSpec& node : spec.nodes) has_entropy_model |= node.type == kEntropyModelType;
  if (!has_entropy_model || conditional_entropy_node(spec)) return false;  // no tables for hyperprior models yet
  const CodecGraph graph = split_for_coding(spec);
  const std::int64_t channels = latent_channels(file, graph, spec.source);
  const layers::FactorizedCodingTables tables = build_tables(file, graph, registry, channels, spec.source);
  layers::store_coding_tables(tables, layers::coding_tables_prefix(graph.entropy_node), file);
  file.metadata[kTablesMetadataKey] =
      nlohmann::json{{"coder", "rANS"}, {"precision_bits", codec::kPrecisionBits}, {"tail_mass", layers::kDefaultTailMass}}
          .dump();
  return true;
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

#include "model_fingerprint.h"

#include <algorithm>

#include "plexus/codec/codec_model.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

void hash_convolution(plexus::Fnv1a64& hash, const codec::IntegerConvLayer& layer) {
  const std::int32_t geometry[] = {
      layer.transposed ? 1 : 0, layer.in_channels, layer.out_channels, layer.kernel, layer.stride, layer.padding,
      layer.output_padding};
  hash.add(geometry, sizeof geometry);
  hash_values(hash, layer.weight);
  hash_values(hash, layer.bias);
}

// Whether `network` is the chain of the first scale hyperprior: convolutions
// with a ReLU rescale between each two, the scales from the last.
bool is_relu_chain(const codec::IntegerNetwork& network) {
  const std::size_t count = network.nodes.size();
  if (network.has_means() || count % 2 == 0 || network.scales != static_cast<std::int32_t>(count)) return false;
  for (std::size_t n = 0; n < count; ++n) {
    const codec::IntegerNode& node = network.nodes[n];
    const bool relu = node.op == codec::IntegerOp::rescale &&
                      std::all_of(node.negative_multiplier.begin(), node.negative_multiplier.end(),
                                  [](std::int64_t m) { return m == 0; });
    if (node.inputs != std::vector<std::int32_t>{static_cast<std::int32_t>(n)} ||
        (n % 2 == 0 ? node.op != codec::IntegerOp::convolution : !relu))
      return false;
  }
  return true;
}

// The integer network. A ReLU chain hashes as before general graphs
// existed (each convolution with the multipliers and shifts of the rescale
// after it), so the files of those models keep their fingerprints.
void hash_integer_network(plexus::Fnv1a64& hash, const codec::IntegerNetwork& network) {
  if (is_relu_chain(network)) {
    const std::vector<std::int64_t> none64;
    const std::vector<std::int32_t> none32;
    for (std::size_t n = 0; n < network.nodes.size(); n += 2) {
      hash_convolution(hash, network.nodes[n].conv);
      const bool last = n + 1 == network.nodes.size();
      hash_values(hash, last ? none64 : network.nodes[n + 1].multiplier);
      hash_values(hash, last ? none32 : network.nodes[n + 1].shift);
    }
    return;
  }
  hash.add_field("integer network");
  for (const codec::IntegerNode& node : network.nodes) {
    const std::int32_t fields[] = {static_cast<std::int32_t>(node.op), node.begin, node.count};
    hash.add(fields, sizeof fields);
    hash_values(hash, node.inputs);
    if (node.op == codec::IntegerOp::convolution) hash_convolution(hash, node.conv);
    hash_values(hash, node.multiplier);
    hash_values(hash, node.negative_multiplier);
    hash_values(hash, node.shift);
    if (node.op == codec::IntegerOp::tanh) hash_values(hash, node.table);
    if (node.op == codec::IntegerOp::checkerboard_mask) hash.add(&node.parity, sizeof node.parity);
  }
  const std::int32_t outputs[] = {network.scales, network.means};
  hash.add(outputs, sizeof outputs);
  hash_values(hash, network.mean_multiplier);
  hash_values(hash, network.mean_shift);
  if (network.decoded >= 0) hash.add(&network.decoded, sizeof network.decoded);
}

}  // namespace

void hash_tensor(plexus::Fnv1a64& hash, const std::string& name, const Tensor& tensor) {
  hash.add_field(name);
  for (std::int64_t dim : tensor.shape()) hash.add(&dim, sizeof dim);
  const Tensor values = tensor.to(Device::cpu()).to(DType::f32);
  hash.add(values.raw_data(), values.nbytes());
}

void hash_hyperprior(plexus::Fnv1a64& hash, const codec::IntegerNetwork& network,
                     const codec::GaussianTables& gaussian) {
  hash.add_field("scale hyperprior");
  hash_integer_network(hash, network);
  hash_values(hash, network.thresholds);
  hash_values(hash, gaussian.scales);
  for (const codec::CodingTable& table : gaussian.tables) {
    hash.add(&table.min, sizeof table.min);
    hash_values(hash, table.cdf);
  }
}

std::optional<std::uint64_t> recorded_fingerprint(const std::map<std::string, std::string>& metadata,
                                                  const std::string& who) {
  auto it = metadata.find(kFingerprintMetadataKey);
  if (it == metadata.end()) return std::nullopt;
  const std::string& text = it->second;
  std::uint64_t value = 0;
  bool hex = text.size() == 16;
  for (char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    hex = hex && digit >= 0;
    value = value << 4 | static_cast<std::uint64_t>(digit < 0 ? 0 : digit);
  }
  if (!hex)
    throw IoError(who + ": the metadata \"" + kFingerprintMetadataKey + "\" is '" + text.substr(0, 40) +
                  "', not 16 lowercase hex digits");
  return value;
}

std::optional<std::uint64_t> recorded_fingerprint(const std::string& path) {
  return recorded_fingerprint(load_safetensors_metadata(path), "'" + path + "'");
}

}  // namespace plexus::codec

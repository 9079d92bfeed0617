#include "plexus/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/atomic_file.h"
#include "plexus/checked_math.h"
#include "plexus/error.h"
#include "plexus/half.h"
#include "plexus/int8.h"
#include "plexus/json_nesting.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"
#include "safetensors_header_keys.h"

namespace plexus {

// The safetensors layout (https://huggingface.co/docs/safetensors):
//   8 bytes   N, the header length, an unsigned little-endian 64-bit integer
//   N bytes   a JSON object: "<name>": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end]} per tensor, offsets relative to
//             the first data byte; optional "__metadata__": {string: string};
//             padded with spaces
//   the data  every tensor's bytes, row-major, little-endian, packed in
//             offset order with no gaps.

namespace {

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kOptimizerPrefix = "optimizer/";

bool host_is_little_endian() {
  const std::uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

void require_little_endian(const std::string& path) {
  if (!host_is_little_endian())
    throw IoError("'" + path + "': safetensors data is little-endian and this host is not; not supported");
}

const char* safetensors_dtype(DType dtype) {
  if (dtype == DType::bf16) throw ConfigError("checkpoints hold f32 or f64 tensors, not bf16");
  return dtype == DType::f64 ? "F64" : "F32";
}

std::string errno_text() { return std::strerror(errno); }

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw IoError("safetensors file '" + path + "': " + problem);
}

std::string offsets_str(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// One tensor entry of a header, validated.
struct Entry {
  std::string name;
  std::string stored;  // the dtype in the file: F32, F64, F16 or I8
  DType dtype;         // in memory: F16 and I8 are read into f32
  Shape shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& value) {
  Entry entry;
  entry.name = name;
  const std::string who = "tensor '" + name + "'";
  if (!value.is_object()) fail(path, who + " must be a JSON object, got " + value.dump());
  for (auto it = value.begin(); it != value.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      fail(path, who + " has an unknown field '" + it.key() + "'");
  if (!value.contains("dtype") || !value["dtype"].is_string()) fail(path, who + " has no \"dtype\" string");
  const std::string dtype = value["dtype"].get<std::string>();
  std::uint64_t element_bytes = 0;
  if (dtype == "F32") entry.dtype = DType::f32, element_bytes = 4;
  else if (dtype == "F64") entry.dtype = DType::f64, element_bytes = 8;
  else if (dtype == "F16") entry.dtype = DType::f32, element_bytes = 2;
  else if (dtype == "I8") entry.dtype = DType::f32, element_bytes = 1;
  else fail(path, who + " has unsupported dtype '" + dtype + "' (Plexus reads F32, F64, F16 and I8)");
  entry.stored = dtype;

  if (!value.contains("shape") || !value["shape"].is_array()) fail(path, who + " has no \"shape\" array");
  std::uint64_t numel = 1;
  for (const auto& dim : value["shape"]) {
    if (!dim.is_number_unsigned()) fail(path, who + " has a bad shape " + value["shape"].dump());
    std::uint64_t d = dim.get<std::uint64_t>();
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        (d != 0 && numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / d))
      fail(path, who + " has a shape too large to address: " + value["shape"].dump());
    numel *= d;
    entry.shape.push_back(static_cast<std::int64_t>(d));
  }

  const auto& offsets = value.contains("data_offsets") ? value["data_offsets"] : nlohmann::json();
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(path, who + " needs \"data_offsets\": [begin, end] (two non-negative integers), got " + offsets.dump());
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();
  if (entry.begin > entry.end)
    fail(path, who + " has data_offsets " + offsets_str(entry.begin, entry.end) + " that end before they begin");
  if (numel > std::numeric_limits<std::uint64_t>::max() / element_bytes)
    fail(path, who + " has a shape too large to address: " + value["shape"].dump());
  std::uint64_t expected = numel * element_bytes;
  if (entry.end - entry.begin != expected)
    fail(path, who + " is " + dtype + shape_str(entry.shape) + ", which needs " + std::to_string(expected) +
                   " bytes, but its data_offsets " + offsets_str(entry.begin, entry.end) + " span " +
                   std::to_string(entry.end - entry.begin));
  return entry;
}

}  // namespace

namespace {

// Each tensor as written: its host copy, or its bytes in a compact dtype.
struct Chunk {
  Tensor host;
  std::vector<unsigned char> bytes;
  std::uint64_t size() const { return host.defined() ? static_cast<std::uint64_t>(host.nbytes()) : bytes.size(); }
  const void* data() const { return host.defined() ? host.raw_data() : bytes.data(); }
};

Chunk f16_chunk(const std::string& path, const Tensor& tensor, const std::string& name) {
  Tensor rounded;
  try {
    rounded = round_to_f16(tensor, name);
  } catch (const Error& e) {
    throw IoError("cannot write checkpoint '" + path + "' with F16 weights: " + e.what());
  }
  Chunk chunk;
  chunk.bytes.resize(static_cast<std::size_t>(rounded.numel()) * sizeof(std::uint16_t));
  const float* values = rounded.data<float>();
  for (std::int64_t i = 0; i < rounded.numel(); ++i) {
    const std::uint16_t half = f16_bits_from_f32(values[i]);
    std::memcpy(chunk.bytes.data() + i * sizeof half, &half, sizeof half);
  }
  return chunk;
}

// The I8 bytes of `stored`, after checking that `tensor` holds what they load as.
Chunk int8_chunk(const std::string& path, const Tensor& tensor, const std::string& name, const Int8Tensor& stored) {
  const auto problem = [&](const std::string& what) {
    return IoError("cannot write checkpoint '" + path + "' with int8 weights: tensor '" + name + "' " + what);
  };
  if (stored.shape != tensor.shape() || stored.values.size() != static_cast<std::size_t>(tensor.numel()))
    throw problem("is " + shape_str(tensor.shape()) + " but its int8 form is " + shape_str(stored.shape));
  if (!stored.scale.defined() || stored.scale.dtype() != DType::f32 ||
      stored.scale.shape().size() != stored.shape.size())
    throw problem("has no f32 scale of its rank");
  for (std::size_t d = 0; d < stored.shape.size(); ++d)
    if (stored.scale.shape()[d] != 1 && stored.scale.shape()[d] != stored.shape[d])
      throw problem("has a scale " + shape_str(stored.scale.shape()) + " that does not broadcast to it");
  const Tensor loaded = dequantize_int8(stored);
  const Tensor host = tensor.to(Device::cpu());
  if (host.dtype() != DType::f32 || std::memcmp(host.raw_data(), loaded.raw_data(), loaded.nbytes()) != 0)
    throw problem("does not hold the f32 values its int8 form loads as (store dequantize_int8 of it first)");
  Chunk chunk;
  chunk.bytes.resize(stored.values.size());
  std::memcpy(chunk.bytes.data(), stored.values.data(), stored.values.size());
  return chunk;
}

}  // namespace

void save_safetensors(const std::string& path, const TensorFile& file, const std::set<std::string>& stored_as_f16) {
  CompactStorage storage;
  storage.f16 = stored_as_f16;
  save_safetensors(path, file, storage);
}

void save_safetensors(const std::string& path, const TensorFile& file, const CompactStorage& storage) {
  require_little_endian(path);
  nlohmann::json header = nlohmann::json::object();
  std::vector<Chunk> data;
  std::uint64_t offset = 0;
  const auto add = [&](const std::string& name, const char* dtype, const Shape& shape, Chunk chunk) {
    const std::uint64_t end = offset + chunk.size();
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {offset, end}}};
    offset = end;
    data.push_back(std::move(chunk));
  };
  const std::size_t entries = file.tensors.size() + storage.int8.size();  // a scale per int8 tensor
  if (static_cast<std::int64_t>(entries) > limits::kMaxCheckpointTensors)
    throw IoError("cannot write checkpoint '" + path + "': " + std::to_string(entries) +
                  " tensors, more than the limit of " + std::to_string(limits::kMaxCheckpointTensors) +
                  " that a safetensors file may hold");
  for (const std::string& name : storage.f16)
    if (!file.tensors.count(name))
      throw IoError("cannot write checkpoint '" + path + "': no tensor '" + name + "' to store as F16");
  for (const auto& [name, stored] : storage.int8) {
    if (!file.tensors.count(name))
      throw IoError("cannot write checkpoint '" + path + "': no tensor '" + name + "' to store as I8");
    if (storage.f16.count(name))
      throw IoError("cannot write checkpoint '" + path + "': tensor '" + name + "' is to be stored as both F16 and I8");
  }
  for (const auto& [name, tensor] : file.tensors) {
    if (name == kMetadataKey) throw IoError("cannot write checkpoint '" + path + "': a tensor is named '__metadata__'");
    if (is_int8_scale_name(name))
      throw IoError("cannot write checkpoint '" + path + "': tensor '" + name +
                    "' has a name ending in '.int8_scale', which is kept for the scales of I8 tensors");
    if (!tensor.defined()) throw IoError("cannot write checkpoint '" + path + "': tensor '" + name + "' is undefined");
    auto int8 = storage.int8.find(name);
    if (int8 != storage.int8.end()) {
      add(name, "I8", tensor.shape(), int8_chunk(path, tensor, name, int8->second));
      add(int8_scale_name(name), "F32", int8->second.scale.shape(), Chunk{int8->second.scale, {}});
    } else if (storage.f16.count(name)) {
      add(name, "F16", tensor.shape(), f16_chunk(path, tensor, name));
    } else {
      add(name, safetensors_dtype(tensor.dtype()), tensor.shape(), Chunk{tensor.to(Device::cpu()), {}});
    }
  }
  if (!file.metadata.empty()) header[kMetadataKey] = file.metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name or metadata value that is not UTF-8
    throw IoError("cannot write checkpoint '" + path + "': the header cannot be encoded: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  AtomicFile out(path, "checkpoint");
  out.write(length, sizeof length);
  out.write(text.data(), text.size());
  for (const Chunk& chunk : data) out.write(chunk.data(), chunk.size());
  out.commit();
}

namespace {

// The f32 tensor of the I8 tensor `name` (values q): float(q) * scale, with
// the scale tensor of `file` checked first (stored as F32 per `stored_f32`).
Tensor int8_tensor(const std::string& path, const std::string& name, const std::vector<std::int8_t>& q,
                   const TensorFile& file, const std::set<std::string>& stored_f32) {
  const std::string scale_name = int8_scale_name(name);
  const Shape& shape = file.tensors.at(name).shape();
  const std::string who = "I8 tensor '" + name + "' " + shape_str(shape);
  auto it = file.tensors.find(scale_name);
  if (it == file.tensors.end()) fail(path, who + " has no scale tensor '" + scale_name + "'");
  if (!stored_f32.count(scale_name)) fail(path, "the scale tensor '" + scale_name + "' of " + who + " must be F32");
  const Tensor& scale = it->second;
  bool broadcasts = scale.shape().size() == shape.size();
  for (std::size_t d = 0; broadcasts && d < shape.size(); ++d)
    broadcasts = scale.shape()[d] == 1 || scale.shape()[d] == shape[d];
  if (!broadcasts)
    fail(path, "the scale tensor '" + scale_name + "' is " + shape_str(scale.shape()) + ", which does not fit " + who +
                   " (it needs the same rank, each dimension 1 or the tensor's)");
  const float* scales = scale.data<float>();
  for (std::int64_t i = 0; i < scale.numel(); ++i)
    if (!(scales[i] >= 0.0f) || static_cast<double>(scales[i]) * 127.0 > std::numeric_limits<float>::max())
      fail(path, "the scale tensor '" + scale_name + "' holds " + std::to_string(scales[i]) + " at element " +
                     std::to_string(i) + "; a scale must be >= 0 with 127 * scale a finite f32");
  for (std::size_t i = 0; i < q.size(); ++i)
    if (q[i] == -128)
      fail(path, who + " holds -128 at element " + std::to_string(i) + ", outside the symmetric range [-127, 127]");
  return dequantize_int8(q.data(), shape, scales, scale.shape());
}

}  // namespace

namespace {

// An open safetensors file, its header read and checked as JSON.
struct SafetensorsHeader {
  std::ifstream in;  // at the first data byte
  std::uint64_t file_size = 0, header_size = 0;
  nlohmann::json json;
};

void read_header(const std::string& path, SafetensorsHeader& header) {
  require_little_endian(path);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) fail(path, "cannot open it: " + errno_text());
  if (!S_ISREG(info.st_mode)) fail(path, "it is not a regular file");
  std::ifstream& in = header.in;
  in.open(path, std::ios::binary);
  if (!in) fail(path, "cannot open it: " + errno_text());
  in.seekg(0, std::ios::end);
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0, std::ios::beg);
  if (file_size < 8)
    fail(path, "the file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<std::uint64_t>(length[i]) << (8 * i);
  if (header_size > file_size - 8)
    fail(path, "the header length " + std::to_string(header_size) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  std::string text(static_cast<std::size_t>(header_size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  if (!in) fail(path, "reading the header failed");

  if (text.empty() || text[0] != '{') fail(path, "the header must begin with '{' (a JSON object)");
  // The keys first, in one linear pass: a header naming a tensor twice is
  // refused as such, and one with absurdly many entries before it is built.
  const HeaderKeys keys = scan_header_keys(text, limits::kMaxCheckpointTensors);
  if (keys.too_deep)
    fail(path, "the header nests arrays or objects more than " + std::to_string(kMaxHeaderNesting) +
                   " levels deep (a safetensors header needs 3)");
  if (!keys.json_error.empty()) fail(path, "the header is not valid JSON: " + keys.json_error);
  if (keys.tensor_entries > limits::kMaxCheckpointTensors)
    fail(path, "the header has " + std::to_string(keys.tensor_entries) + " tensor entries, more than the limit of " +
                   std::to_string(limits::kMaxCheckpointTensors));
  if (!keys.duplicate.empty()) fail(path, "the header names tensor '" + keys.duplicate + "' twice");
  try {
    header.json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.json.is_object()) fail(path, "the header must be a JSON object, got " + header.json.dump().substr(0, 80));
  header.file_size = file_size;
  header.header_size = header_size;
}

std::map<std::string, std::string> header_metadata(const std::string& path, const nlohmann::json& value) {
  if (!value.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
  std::map<std::string, std::string> metadata;
  for (auto m = value.begin(); m != value.end(); ++m) {
    if (!m.value().is_string())
      fail(path, "\"__metadata__\" entry '" + m.key() + "' must be a string, got " + m.value().dump());
    metadata[m.key()] = m.value().get<std::string>();
  }
  return metadata;
}

}  // namespace

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  SafetensorsHeader header;
  read_header(path, header);
  auto it = header.json.find(kMetadataKey);
  return it == header.json.end() ? std::map<std::string, std::string>{} : header_metadata(path, *it);
}

TensorFile load_safetensors(const std::string& path) {
  SafetensorsHeader read;
  read_header(path, read);
  std::ifstream& in = read.in;
  const std::uint64_t file_size = read.file_size, header_size = read.header_size;
  const nlohmann::json& header = read.json;

  TensorFile result;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      result.metadata = header_metadata(path, it.value());
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), it.value()));
  }

  // The data section is packed: in offset order, each tensor starts where
  // the previous one ended, from 0 to the end of the file.
  const std::uint64_t data_size = file_size - 8 - header_size;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t expected_begin = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.end > data_size)
      fail(path, "tensor '" + e.name + "' has data_offsets " + offsets_str(e.begin, e.end) +
                     " beyond the data section of " + std::to_string(data_size) + " bytes");
    if (e.begin < expected_begin)
      fail(path, "tensor '" + e.name + "' has data_offsets " + offsets_str(e.begin, e.end) + " overlapping tensor '" +
                     entries[i - 1].name + "' " + offsets_str(entries[i - 1].begin, entries[i - 1].end));
    if (e.begin > expected_begin)
      fail(path, "tensor '" + e.name + "' has data_offsets " + offsets_str(e.begin, e.end) +
                     " leaving a gap of unclaimed bytes from " + std::to_string(expected_begin));
    expected_begin = e.end;
  }
  if (expected_begin != data_size)
    fail(path, "the data section is " + std::to_string(data_size) + " bytes but the tensors cover only " +
                   std::to_string(expected_begin));

  // Packed and sorted: each tensor's bytes follow the previous one's.
  std::map<std::string, std::vector<std::int8_t>> int8_values;  // I8 tensors, until their scales are read
  std::set<std::string> stored_f32;
  for (const Entry& e : entries) {
    const std::streamsize bytes = static_cast<std::streamsize>(e.end - e.begin);
    Tensor tensor(e.shape, e.dtype, Device::cpu());
    if (e.stored == "F16") {
      std::vector<std::uint16_t> halves(static_cast<std::size_t>(tensor.numel()));
      in.read(reinterpret_cast<char*>(halves.data()), bytes);
      float* values = tensor.data<float>();
      for (std::size_t i = 0; i < halves.size(); ++i) values[i] = f32_from_f16_bits(halves[i]);
    } else if (e.stored == "I8") {
      std::vector<std::int8_t>& q = int8_values[e.name];
      q.resize(static_cast<std::size_t>(tensor.numel()));
      in.read(reinterpret_cast<char*>(q.data()), bytes);
    } else {
      in.read(static_cast<char*>(tensor.raw_data()), bytes);
      if (e.stored == "F32") stored_f32.insert(e.name);
    }
    if (!in) fail(path, "reading the data of tensor '" + e.name + "' failed");
    result.tensors[e.name] = tensor;
  }
  for (const auto& [name, q] : int8_values) result.tensors[name] = int8_tensor(path, name, q, result, stored_f32);
  for (const auto& [name, q] : int8_values) result.tensors.erase(int8_scale_name(name));
  for (const auto& [name, tensor] : result.tensors)
    if (is_int8_scale_name(name))
      fail(path, "tensor '" + name + "' is named as the scale of an I8 tensor '" +
                     name.substr(0, name.size() - int8_scale_name("").size()) + "', which the file does not hold");
  return result;
}

// ---------------------------------------------------------------------------
// Training checkpoints

namespace {

// "plugin_layers": a JSON object, layer type -> the file name of the plugin
// that registered it, for each plugin type the net uses.
constexpr const char* kPluginLayersKey = "plugin_layers";
const char* const kReservedMetadata[] = {"step", "optimizer", "optimizer_steps", "model_spec", kPluginLayersKey};

// The net's plugin layer types -> the plugin's file name (not its path:
// the checkpoint may be read on another machine).
nlohmann::json plugin_layers(const Net& net) {
  const std::string prefix = "plugin ";  // LayerTypeInfo::origin of a plugin's type
  nlohmann::json result = nlohmann::json::object();
  for (const auto& [type, origin] : net.layer_type_origins())
    if (origin.rfind(prefix, 0) == 0)
      result[type] = std::filesystem::path(origin.substr(prefix.size())).filename().string();
  return result;
}

// A step count from the metadata: an integer in [0, limits::kMaxSteps].
std::int64_t metadata_steps(const std::string& path, const TensorFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw IoError("checkpoint '" + path + "' has no \"" + key + "\" in its metadata");
  std::int64_t value = -1;
  try {
    std::size_t used = 0;
    value = std::stoll(it->second, &used);
    if (used != it->second.size()) value = -1;
  } catch (const std::exception&) {
    value = -1;
  }
  if (value < 0 || value > limits::kMaxSteps)
    throw IoError("checkpoint '" + path + "': metadata \"" + key + "\" is '" + it->second +
                  "', not an integer in [0, " + std::to_string(limits::kMaxSteps) + "]");
  return value;
}

// The first element of a host tensor that is NaN or infinite, or -1.
std::int64_t first_non_finite(const Tensor& host) {
  const std::int64_t n = host.numel();
  if (host.dtype() == DType::f64) {
    const double* v = host.data<double>();
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(v[i])) return i;
  } else {
    const float* v = host.data<float>();
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(v[i])) return i;
  }
  return -1;
}

}  // namespace

void save_checkpoint(const std::string& path, Net& net, const Optimizer* optimizer, std::int64_t step,
                     const std::map<std::string, std::string>& metadata, const ModelSpec* spec) {
  TensorFile file;
  for (const auto& [key, value] : metadata) {
    for (const char* reserved : kReservedMetadata)
      if (key == reserved)
        throw IoError("cannot write checkpoint '" + path + "': metadata key '" + key +
                      "' is reserved for Plexus itself");
    file.metadata[key] = value;
  }
  file.metadata["step"] = std::to_string(step);
  file.metadata["model_spec"] = (spec ? *spec : net.spec()).to_json().dump();
  const nlohmann::json plugins = plugin_layers(net);
  if (!plugins.empty()) file.metadata[kPluginLayersKey] = plugins.dump();
  for (const NamedParameter& named : net.parameters()) file.tensors[named.name] = named.parameter->value;
  if (optimizer) {
    file.metadata["optimizer"] = optimizer->name();
    file.metadata["optimizer_steps"] = std::to_string(optimizer->steps_taken());
    for (const auto& [name, tensor] : optimizer->state()) file.tensors[kOptimizerPrefix + name] = tensor;
  }
  save_safetensors(path, file);
}

MatchingLoad load_matching_parameters(const std::string& path, Net& net) {
  TensorFile file = load_safetensors(path);
  MatchingLoad result;
  std::vector<std::pair<Parameter*, const Tensor*>> copies;  // checked first, copied after
  for (const NamedParameter& named : net.parameters()) {
    auto it = file.tensors.find(named.name);
    if (it == file.tensors.end()) {
      result.missing.push_back(named.name);
      continue;
    }
    if (it->second.shape() != named.parameter->value.shape())
      throw IoError("'" + path + "': tensor '" + named.name + "' is " + shape_str(it->second.shape()) +
                    " in the file but " + shape_str(named.parameter->value.shape()) +
                    " in the model; it cannot initialise it");
    const std::int64_t bad = first_non_finite(it->second);
    if (bad >= 0)
      throw IoError("'" + path + "': tensor '" + named.name + "' holds a non-finite value at element " +
                    std::to_string(bad));
    copies.emplace_back(named.parameter, &it->second);
    result.loaded.push_back(named.name);
  }
  for (auto& [parameter, tensor] : copies)
    parameter->value.copy_from(tensor->to(parameter->value.dtype()).to(parameter->value.device()));
  return result;
}

std::int64_t load_checkpoint(const std::string& path, Net& net, Optimizer* optimizer,
                             std::map<std::string, std::string>* metadata) {
  TensorFile file = load_safetensors(path);
  const std::int64_t step = metadata_steps(path, file, "step");

  // Everything is checked before anything is copied: a bad checkpoint leaves
  // the net and the optimiser as they were.
  std::vector<NamedParameter> parameters = net.parameters();
  std::map<std::string, const NamedParameter*> by_name;
  for (const NamedParameter& named : parameters) {
    by_name[named.name] = &named;
    auto it = file.tensors.find(named.name);
    if (it == file.tensors.end())
      throw IoError("checkpoint '" + path + "' has no tensor '" + named.name + "' (the net's is " +
                    named.parameter->value.describe() + ")");
    if (it->second.shape() != named.parameter->value.shape())
      throw IoError("checkpoint '" + path + "': tensor '" + named.name + "' is " + shape_str(it->second.shape()) +
                    " in the file but " + shape_str(named.parameter->value.shape()) + " in the net");
    const std::int64_t bad = first_non_finite(it->second);
    if (bad >= 0)
      throw IoError("checkpoint '" + path + "': tensor '" + named.name + "' holds a non-finite value (" +
                    std::to_string(it->second.to_values()[static_cast<std::size_t>(bad)]) + " at element " +
                    std::to_string(bad) + "); the weights are corrupt or training diverged before it was saved");
  }
  std::map<std::string, Tensor> optimizer_state;
  std::int64_t optimizer_steps = 0;
  if (optimizer) {
    auto name = file.metadata.find("optimizer");
    if (name == file.metadata.end())
      throw IoError("checkpoint '" + path + "' holds no optimiser state, but a " + optimizer->name() +
                    " optimiser was given to restore");
    if (name->second != optimizer->name())
      throw IoError("checkpoint '" + path + "' holds " + name->second + " optimiser state, not " + optimizer->name());
    optimizer_steps = file.metadata.count("optimizer_steps") ? metadata_steps(path, file, "optimizer_steps") : step;
    const std::string prefix = kOptimizerPrefix;
    for (const auto& [key, tensor] : file.tensors) {
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      std::string slot = key.substr(prefix.size());  // "<state>/<parameter>"
      std::size_t slash = slot.find('/');
      std::string parameter = slash == std::string::npos ? "" : slot.substr(slash + 1);
      auto owner = by_name.find(parameter);
      if (owner == by_name.end())
        throw IoError("checkpoint '" + path + "': optimiser state '" + key + "' belongs to no parameter of the net");
      const Tensor& value = owner->second->parameter->value;
      if (tensor.shape() != value.shape())
        throw IoError("checkpoint '" + path + "': optimiser state '" + key + "' is " + shape_str(tensor.shape()) +
                      " in the file but parameter '" + parameter + "' is " + shape_str(value.shape()) + " in the net");
      optimizer_state[slot] = tensor.to(value.dtype()).to(value.device());
    }
  }

  for (const NamedParameter& named : parameters) {
    Tensor& value = named.parameter->value;
    value.copy_from(file.tensors.at(named.name).to(value.dtype()));
  }
  if (optimizer) {
    try {
      optimizer->load_state(optimizer_state, optimizer_steps);
    } catch (const IoError&) {
      throw;
    } catch (const Error& e) {
      throw IoError("checkpoint '" + path + "': " + e.what());
    }
  }
  if (metadata) *metadata = file.metadata;
  return step;
}

ModelSpec spec_from_checkpoint(const TensorFile& file, const std::string& path) {
  auto it = file.metadata.find("model_spec");
  if (it == file.metadata.end())
    throw IoError("'" + path + "' carries no model spec in its metadata; is it a checkpoint written by Plexus?");
  try {
    return ModelSpec::from_text(it->second, path + " (model spec in its metadata)");
  } catch (const ConfigError& e) {
    throw IoError(std::string("'") + path + "' carries a model spec that does not parse: " + e.what());
  }
}

ModelSpec spec_from_checkpoint(const TensorFile& file, const std::string& path, const Registry& registry) {
  ModelSpec spec = spec_from_checkpoint(file, path);
  check_plugin_layers(file, spec, registry, path);
  return spec;
}

namespace {
// The checkpoint's "plugin_layers" (type -> plugin file name); empty when absent.
std::map<std::string, std::string> recorded_plugin_layers(const TensorFile& file, const std::string& path) {
  std::map<std::string, std::string> result;
  auto it = file.metadata.find(kPluginLayersKey);
  if (it == file.metadata.end()) return result;
  check_json_nesting(it->second, "checkpoint '" + path + "': metadata \"" + std::string(kPluginLayersKey) + "\"");
  const nlohmann::json json = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object())
    throw IoError("checkpoint '" + path + "': metadata \"" + kPluginLayersKey +
                  "\" is not a JSON object: " + it->second);
  for (auto entry = json.begin(); entry != json.end(); ++entry) {
    if (!entry.value().is_string())
      throw IoError("checkpoint '" + path + "': metadata \"" + kPluginLayersKey + "\" maps '" + entry.key() + "' to " +
                    entry.value().dump() + ", not a plugin file name");
    result[entry.key()] = entry.value().get<std::string>();
  }
  return result;
}
}  // namespace

void check_plugin_layers(const TensorFile& file, const ModelSpec& spec, const Registry& registry,
                         const std::string& path) {
  const std::map<std::string, std::string> recorded = recorded_plugin_layers(file, path);
  std::vector<std::string> problems;  // one per unknown type, at its first node
  std::set<std::string> reported, plugin_files;
  bool any_recorded = false;
  for (const NodeSpec& node : spec.nodes) {
    if (registry.contains(node.type) || !reported.insert(node.type).second) continue;
    std::string problem = "node '" + node.name + "' has type '" + node.type + "', unknown here; ";
    auto plugin = recorded.find(node.type);
    if (plugin == recorded.end()) {
      problem += "the checkpoint names no plugin for it";
    } else {
      any_recorded = true;
      plugin_files.insert(plugin->second);
      problem += "the checkpoint was written with the plugin " + plugin->second;
    }
    problems.push_back(problem);
  }
  if (!any_recorded) return;  // nothing to add to what Net says about an unknown type
  std::string message = "'" + path + "' needs layer types this program does not have: ";
  for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
  std::string files;
  for (const auto& name : plugin_files) files += (files.empty() ? "" : " and ") + name;
  message += ". Pass --plugin with the path to " + files + " (or put its folder on PLEXUS_PLUGIN_PATH)";
  throw ConfigError(message);
}

}  // namespace plexus

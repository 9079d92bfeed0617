#pragma once
// Checkpoints in the safetensors format (an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data), so weights open in Python tooling.
#include <map>
#include <set>
#include <string>

#include "plexus/int8.h"
#include "plexus/model_spec.h"
#include "plexus/tensor.h"

namespace plexus {

struct TensorFile {
  std::map<std::string, Tensor> tensors;        // on the CPU
  std::map<std::string, std::string> metadata;  // the "__metadata__" strings
};

// How save_safetensors stores tensors of a TensorFile in fewer bytes than
// their own dtype. A tensor is named in one of them at most.
struct CompactStorage {
  // Written as dtype "F16", rounded to the nearest f16 (plexus/half.h).
  std::set<std::string> f16;
  // Written as dtype "I8" (q) plus an F32 tensor "<name>.int8_scale"
  // (plexus/int8.h). The file's tensor of that name must already hold
  // dequantize_int8 of it, bit for bit, so that what a program computes
  // with after writing is what the file loads.
  std::map<std::string, Int8Tensor> int8;
};

// Writes atomically: to "<path>.tmp-<pid>", flushed, then renamed over
// `path`, so a crash never leaves a half-written checkpoint behind.
// IoError for more tensors than limits::kMaxCheckpointTensors, for an F16
// value that does not fit in f16, and for an int8 tensor that is not in the
// file, does not match it or whose scale name is taken.
void save_safetensors(const std::string& path, const TensorFile& file, const CompactStorage& storage);
// Tensors named in `stored_as_f16` are written as dtype "F16".
void save_safetensors(const std::string& path, const TensorFile& file, const std::set<std::string>& stored_as_f16 = {});
// Throws IoError naming the file and what is wrong (missing, truncated,
// bad header, a tensor named twice, more tensors than
// limits::kMaxCheckpointTensors, offsets out of range, unsupported dtype).
// Reads F32, F64, F16 and I8; an F16 tensor becomes an f32 one, exactly.
// An I8 tensor "<name>" needs an F32 tensor "<name>.int8_scale" of its rank,
// each dimension 1 or the I8 tensor's, every scale finite, >= 0 and with
// 127 * scale a finite f32; q = -128 is refused. It becomes the f32 tensor
// float(q) * scale (broadcast), and its scale tensor is not returned. A
// tensor named "*.int8_scale" without its I8 tensor is refused too.
TensorFile load_safetensors(const std::string& path);
// Only the "__metadata__" strings, the header checked as load_safetensors
// checks it but no tensor read: a few kilobytes of a file of any size.
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);

}  // namespace plexus

#include <cstdint>
#include <vector>

namespace plexus {

class Net;
class Optimizer;
class Registry;

// A training checkpoint: every parameter of `net` under its name
// ("g_a0.weight"), the optimiser's state under "optimizer/<slot>/<name>",
// and metadata (step, optimiser name, model spec JSON, plus `metadata`).
// The spec recorded is `spec` when given (a model whose training net has
// nodes of its own, such as a loss its trainer adds), else the net's.
// Written atomically (see save_safetensors).
void save_checkpoint(const std::string& path, Net& net, const Optimizer* optimizer, std::int64_t step,
                     const std::map<std::string, std::string>& metadata = {}, const ModelSpec* spec = nullptr);

// The model spec a checkpoint carries (save_checkpoint records it). Throws
// IoError naming `path` when it carries none (not a Plexus checkpoint) or an
// unparsable one.
ModelSpec spec_from_checkpoint(const TensorFile& file, const std::string& path);

// save_checkpoint records, in the metadata key "plugin_layers", each layer
// type of the net that a plugin registered, with the plugin's file name.
// check_plugin_layers throws ConfigError when `registry` lacks a type of
// `spec` that the checkpoint records: the message names each unknown type,
// a node of that type and the plugin file to load. Unknown types the
// checkpoint does not record are left to Net, which reports them too.
void check_plugin_layers(const TensorFile& file, const ModelSpec& spec, const Registry& registry,
                         const std::string& path);
// spec_from_checkpoint(file, path), then check_plugin_layers.
ModelSpec spec_from_checkpoint(const TensorFile& file, const std::string& path, const Registry& registry);

// Restores parameters (and, when `optimizer` is given, its state) from a
// checkpoint; every parameter must be present with the same shape, else
// IoError naming the tensor, both shapes and the file. Returns the step.
std::int64_t load_checkpoint(const std::string& path, Net& net, Optimizer* optimizer,
                             std::map<std::string, std::string>* metadata = nullptr);

// What load_matching_parameters did, by parameter name.
struct MatchingLoad {
  std::vector<std::string> loaded;   // copied from the file
  std::vector<std::string> missing;  // the net's, absent from the file: kept as initialised
};

// Initialises a net from another model's weights (fine-tuning): copies every
// tensor of the file whose name is a parameter or buffer of `net` with the
// same shape; the net's other parameters keep their values. A tensor of the
// right name but another shape is an IoError naming it and both shapes, and
// a non-finite value an IoError naming the tensor; both are checked before
// anything is copied. The file's optimiser state and step are ignored.
MatchingLoad load_matching_parameters(const std::string& path, Net& net);

}  // namespace plexus

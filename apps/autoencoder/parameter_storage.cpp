#include "compress_command.h"

#include <vector>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/error.h"
#include "plexus/half.h"
#include "plexus/int8.h"
#include "plexus/net.h"

namespace plexus::ae {

namespace {

// The names of the parameters of `spec`'s net.
std::vector<std::string> parameter_names(const ModelSpec& spec, const Registry& registry) {
  const int stride = codec::derive_stride(spec, registry);
  Net net(spec, registry, codec::model_input_shapes(spec, Shape{1, 3, stride, stride}), DType::f32, Device::cpu(), 0,
          InitialParameters::for_loading);
  std::vector<std::string> names;
  for (const NamedParameter& named : net.parameters()) names.push_back(named.name);
  return names;
}

// "<node>.weight" -> its output-channel axis, for the nodes whose weight int8 storage quantises.
std::map<std::string, int> int8_weights(const ModelSpec& spec) {
  std::map<std::string, int> axes;
  for (const NodeSpec& node : spec.nodes) {
    const int axis = int8_weight_channel_axis(node.type);
    if (axis >= 0) axes[node.name + ".weight"] = axis;
  }
  return axes;
}

}  // namespace

int int8_weight_channel_axis(const std::string& type) {
  if (type == "Conv2d" || type == "FullyConnected") return 0;
  if (type == "ConvTranspose2d") return 1;
  return -1;
}

CompactStorage store_parameters_as(const std::string& storage, TensorFile& file, const ModelSpec& spec,
                                   const Registry& registry, const std::string& who) {
  if (storage != "f32" && storage != "f16" && storage != "int8")
    throw ConfigError("--storage must be f32, f16 or int8, got '" + storage + "'");
  CompactStorage result;
  if (storage == "f32") return result;
  const std::map<std::string, int> int8_axes = storage == "int8" ? int8_weights(spec) : std::map<std::string, int>{};
  for (const std::string& name : parameter_names(spec, registry)) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw IoError("'" + who + "' has no tensor '" + name + "'");
    try {
      auto axis = int8_axes.find(name);
      if (axis != int8_axes.end()) {
        Int8Tensor stored = quantize_int8(it->second, axis->second, name);
        it->second = dequantize_int8(stored);
        result.int8.emplace(name, std::move(stored));
      } else {
        it->second = round_to_f16(it->second, name);  // exactly representable in f32
        result.f16.insert(name);
      }
    } catch (const IoError&) {
      throw;
    } catch (const Error& e) {
      throw IoError("'" + who + "' cannot be stored as " + storage + ": " + e.what());
    }
  }
  return result;
}

}  // namespace plexus::ae

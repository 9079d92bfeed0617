// libFuzzer harness: a .safetensors file read by load_safetensors, then
// loaded as a training checkpoint (parameters and Adam state) into a small
// net, with the model spec from its metadata parsed as eval does. Any
// plexus::Error is a correct answer; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "memory_file.h"
#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/error.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"
#include "plexus/tensor.h"

namespace {

// fc: FullyConnected 4 -> 3 (fc.weight [3, 4], fc.bias [3]), then a ReLU;
// the checkpoints of the seed corpus were written from this net.
plexus::ModelSpec checkpoint_net_spec() {
  return plexus::ModelSpec::from_text(R"({
    "name": "fuzz",
    "inputs": ["x"],
    "nodes": [
      {"name": "fc", "type": "FullyConnected", "inputs": ["x"], "outputs": ["h"], "params": {"out_features": 3}},
      {"name": "act", "type": "ReLU", "inputs": ["h"], "outputs": ["y"]}
    ]})");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  plexus::set_max_tensor_bytes(std::size_t{16} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const plexus::Registry registry = plexus::builtin_registry();
  static plexus::fuzzing::MemoryFile file;
  file.assign(data, size);
  try {
    const plexus::TensorFile tensors = plexus::load_safetensors(file.path());
    auto spec_text = tensors.metadata.find("model_spec");
    if (spec_text != tensors.metadata.end()) {
      try {
        plexus::ModelSpec::from_text(spec_text->second, "model_spec");
      } catch (const plexus::Error&) {
      }
    }
    plexus::Net net(checkpoint_net_spec(), registry, {{"x", plexus::Shape{2, 4}}}, plexus::DType::f32,
                    plexus::Device::cpu(), 1);
    plexus::Adam adam(1e-3);
    plexus::load_checkpoint(file.path(), net, &adam);
  } catch (const plexus::Error&) {
  }
  return 0;
}

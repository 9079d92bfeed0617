// libFuzzer harness: a model spec (JSON text) parsed, its "loss" section
// read as training reads it (training_loss, training_spec), and the spec
// built into a Net of the built-in layers, as `plexus-ae train --model
// spec.json` does.
// Every model input gets the shape [2, 3, 8, 8]; the Net is then reshaped
// to [1, 3, 16, 12]. Any plexus::Error is a correct answer; anything else
// escaping (another exception, a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/error.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"
#include "plexus/tensor.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Tensors of up to 16 MiB: a spec asking for more is refused by name
  // (ShapeError) instead of exhausting the fuzzer's memory.
  plexus::set_max_tensor_bytes(std::size_t{16} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const plexus::Registry registry = plexus::builtin_registry();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const plexus::ModelSpec spec = plexus::ModelSpec::from_text(text, "fuzz.json");
    try {
      const plexus::codec::TrainingLoss loss = plexus::codec::training_loss(spec);
      const plexus::ModelSpec training = plexus::codec::training_spec(spec, loss);
      (void)training;
    } catch (const plexus::Error&) {
    }
    std::map<std::string, plexus::Shape> shapes, other_shapes;
    for (const auto& input : spec.inputs) {
      shapes[input] = {2, 3, 8, 8};
      other_shapes[input] = {1, 3, 16, 12};
    }
    plexus::Net net(spec, registry, shapes, plexus::DType::f32, plexus::Device::cpu(), 1);
    net.reshape(other_shapes);
  } catch (const plexus::Error&) {
  }
  return 0;
}

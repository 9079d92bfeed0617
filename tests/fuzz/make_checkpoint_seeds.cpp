// Writes the seed corpus of the safetensors fuzzer: checkpoints of the
// fuzzer's net (see safetensors_fuzzer.cpp) with and without Adam state,
// one with its weight stored as I8 (plexus/int8.h) and its bias as F16, and
// plain tensor files (F64; I8 with a scale per column). Built with the fuzzers; run
//   mkdir /tmp/seeds && build-fuzz/tests/fuzz/make_checkpoint_seeds /tmp/seeds
//   python3 tests/fuzz/pack_seeds.py /tmp/seeds tests/fuzz/corpus/safetensors.zip
#include <cstdio>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/int8.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_FOLDER\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  const plexus::ModelSpec spec = plexus::ModelSpec::from_text(R"({
    "name": "fuzz",
    "inputs": ["x"],
    "nodes": [
      {"name": "fc", "type": "FullyConnected", "inputs": ["x"], "outputs": ["h"], "params": {"out_features": 3}},
      {"name": "act", "type": "ReLU", "inputs": ["h"], "outputs": ["y"]}
    ]})");
  const plexus::Registry registry = plexus::builtin_registry();
  plexus::Net net(spec, registry, {{"x", plexus::Shape{2, 4}}}, plexus::DType::f32, plexus::Device::cpu(), 7);
  plexus::save_checkpoint(out + "/weights-only.safetensors", net, nullptr, 12);
  plexus::Adam adam(1e-3);
  plexus::Context ctx(plexus::Device::cpu(), 1);
  adam.step(ctx, net.parameters());
  plexus::save_checkpoint(out + "/with-adam.safetensors", net, &adam, 1, {{"note", "seed"}});
  plexus::TensorFile compact;
  compact.metadata["step"] = "3";
  compact.metadata["model_spec"] = net.spec().to_json().dump();
  plexus::CompactStorage storage;
  storage.int8["fc.weight"] = plexus::quantize_int8(net.layer("fc").parameter("weight").value, 0, "fc.weight");
  compact.tensors["fc.weight"] = plexus::dequantize_int8(storage.int8["fc.weight"]);
  compact.tensors["fc.bias"] = net.layer("fc").parameter("bias").value;
  storage.f16.insert("fc.bias");
  plexus::save_safetensors(out + "/int8-weight.safetensors", compact, storage);
  plexus::TensorFile columns;  // I8 with a scale per column (axis 1), as a ConvTranspose2d weight has
  plexus::CompactStorage by_column;
  by_column.int8["t"] = plexus::quantize_int8(
      plexus::Tensor::from_values({1, -2, 3, 0.5, 0.25, -0.125}, {2, 3}, plexus::DType::f32), 1, "t");
  columns.tensors["t"] = plexus::dequantize_int8(by_column.int8["t"]);
  plexus::save_safetensors(out + "/plain-int8-columns.safetensors", columns, by_column);
  plexus::TensorFile plain;
  plain.tensors["t"] = plexus::Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3}, plexus::DType::f64);
  plain.metadata["k"] = "v";
  plexus::save_safetensors(out + "/plain-f64.safetensors", plain);
  return 0;
}

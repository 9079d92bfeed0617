// plexus-spec-probe: what lab/bench/test_torch_translation.py checks the
// PyTorch translation of a model spec (spec_torch.py) against. On the CPU it
// builds the spec's Net for images [batch, 3, patch, patch] with its
// parameters initialised from --seed, every "weight" (the convolutions')
// multiplied by --weight-scale (at 2 the latents of a freshly initialised
// model lie well past +-1/2, so rounding and the entropy models' tails are
// exercised, not only their values at 0), writes them to --weights (a
// safetensors checkpoint, names "<node>.<parameter>"), runs one forward in
// eval mode (the quantisers round, so the result is deterministic) and
// prints one JSON object: every parameter's name and shape, and the
// forward's "mse" and "bpp".
// The image is the fixed pattern image[i] = (i mod 251) / 250 over its
// elements in row-major order; a variable-rate spec gets levels n mod K and
// MSE weights 1 (the test builds the same inputs).
//   plexus-spec-probe --spec models/specs/bls2017.json --weights /tmp/w.safetensors [--batch 2] [--patch 64]
//                     [--weight-scale 2]
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/net.h"

using namespace plexus;

namespace {

Tensor pattern_image(const Shape& shape) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 251) / 250.0;
  return Tensor::from_values(values, shape, DType::f32, Device::cpu());
}

void scale_weights(Net& net, double scale) {
  for (const auto& p : net.parameters()) {
    if (p.parameter->name != "weight") continue;
    Tensor& value = p.parameter->value;
    float* data = value.data<float>();
    for (std::int64_t i = 0; i < value.numel(); ++i) data[i] = static_cast<float>(data[i] * scale);
  }
}

nlohmann::json probe(const std::string& spec_path, const std::string& weights, std::int64_t batch, std::int64_t patch,
                     std::uint64_t seed, double weight_scale) {
  const ModelSpec spec = ModelSpec::from_file(spec_path);
  const Registry registry = builtin_registry();
  const Shape image{batch, 3, patch, patch};
  Net net(spec, registry, codec::model_input_shapes(spec, image), DType::f32, Device::cpu(), seed);
  Context ctx(Device::cpu(), seed);
  ctx.set_training(false);
  net.input(codec::kImage).copy_from(pattern_image(image));
  const int levels = codec::rate_levels(spec);
  if (levels > 0) {
    std::vector<double> level(static_cast<std::size_t>(batch)), weight(static_cast<std::size_t>(batch), 1.0);
    for (std::size_t n = 0; n < level.size(); ++n) level[n] = static_cast<double>(n % static_cast<std::size_t>(levels));
    codec::set_rate_inputs(ctx, net, level, weight);
  }
  scale_weights(net, weight_scale);
  save_checkpoint(weights, net, nullptr, 0);
  net.forward(ctx);
  nlohmann::json parameters = nlohmann::json::object();
  for (const auto& p : net.parameters()) parameters[p.name] = p.parameter->value.shape();
  return {{"parameters", parameters},
          {"mse", net.blob(codec::kDistortion).to_values().at(0)},
          {"bpp", net.blob(codec::kRate).to_values().at(0)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plexus-spec-probe: a spec's parameters and one deterministic CPU forward (JSON on stdout)"};
  std::string spec, weights;
  std::int64_t batch = 2, patch = 64;
  std::uint64_t seed = 1;
  double weight_scale = 1.0;
  app.add_option("--spec", spec, "model spec JSON")->required();
  app.add_option("--weights", weights, "where to write the initial parameters (safetensors)")->required();
  app.add_option("--batch", batch, "images")->capture_default_str();
  app.add_option("--patch", patch, "image side, a multiple of the model's stride")->capture_default_str();
  app.add_option("--seed", seed, "seed of the initial parameters")->capture_default_str();
  app.add_option("--weight-scale", weight_scale,
                 "factor every convolution weight is multiplied by after initialisation")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    std::cout << probe(spec, weights, batch, patch, seed, weight_scale).dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "plexus-spec-probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// libFuzzer harness for the plexus-ae decoder: any bytes given to
// CodecModel::decompress must either decode or throw plexus::Error; a crash,
// a sanitizer report, a hang, a huge allocation or any other exception is a bug.
//
// Three small models are built here (no files), images up to 64x64 pixels:
//   factorized (version-1 files): Conv2d 3x3/2 to 4 channels, the rounding
//     quantiser, the FactorizedEntropyModel, ConvTranspose2d back;
//   scale hyperprior (version-2 files): the same y, a hyper-analysis Conv2d
//     3x3/2 to 3 channels = z, its FactorizedEntropyModel, a hyper-synthesis
//     ConvTranspose2d 3x3/2 + ReLU = the scales of a GaussianConditional
//     (so the integer network and the Gaussian tables are decoded too);
//   mean-scale hyperprior (version-3 files): the same y and z, ConvTranspose2d
//     3x3/2 + LeakyReLU + Conv2d 1x1 to 8 channels, split into the scales and
//     the means; y_hat = QuantizeAroundMean(y, means) (the integer means too);
//   channel-conditional (version-4 files): the same y in slices of 1 and 3
//     channels, slice 1's means and scales also reading slice 0's decoded
//     values, each slice with a latent residual prediction (Tanh, Add);
//   variable-rate mean-scale (version-3 files with a rate level, flag bit 1):
//     the mean-scale model with GainUnit nodes of 3 levels on y and before
//     the synthesis; its seeds are coded at level 1.5;
//   checkerboard (version-5 files only): the mean-scale model's y and z, the
//     hyper-synthesis to 8 parameters, and a checkerboard context (the
//     rounded y's anchors, a Conv2d 3x3 kept at the other positions) joined
//     to them by a Conv2d 1x1 to the scales and means;
//   grouped checkerboard (version-5 files only): the mean-scale model's y in
//     groups of 1 and 3 channels, each coded as a checkerboard (a Conv2d 3x3
//     of its anchors kept at the other positions), group 1's parameters also
//     reading group 0's decoded values;
//   autoregressive (version-5 files only): as the checkerboard model, with a
//     context of the rounded y through a Conv2d 3x3 with mask "A" in place of
//     the masks.
// So that inputs get past the checksum and the fingerprint, the first byte
// of an input chooses how the rest is used:
//   bit 0: write the model's fingerprint into bytes 8..15
//   bit 1: recompute the trailing CRC-32
//   bit 2: decode with the scale-hyperprior model
//   bit 3: decode with the mean-scale model (else, without bit 2, the factorized one)
//   bit 4: decode with the channel-conditional model (before bits 2 and 3)
//   bit 5: decode with the variable-rate model (before bits 2, 3 and 4)
//   bit 6: decode with the checkerboard model (before bits 2 to 5); with bit 4
//     too, with the grouped checkerboard model; with bit 5 too, with the
//     autoregressive model
//   bit 7: (the C API target) decode into RGBA rather than RGB
// Every model decodes the files of its kind's own version (1 to 4) and the
// sectioned version 5. Built as c_api_fuzzer (PLEXUS_FUZZ_C_API=1), each
// input goes to the C API instead (plexus/codec.h): plexus_codec_get_info,
// then plexus_codec_decode_rgb or _rgba with a model opened from its file.
// Seed files: PLEXUS_FUZZ_WRITE_SEEDS=<folder> <fuzzer> -runs=0 writes valid
// files for every model (the committed corpus/bitstream_fuzzer/): seed-0 to
// seed-49 in the kinds' versions 1 to 4, seed-50 to seed-89 the same images
// up to 32x17 in version 5, and seed-90 to seed-99 version-5 files with an
// unknown optional section (the decoder skips it), and seed-100 to seed-109
// version-5 files with an ICC profile section; seed-110 to seed-123 the
// checkerboard model's files (of every size, then with an unknown optional
// section and with an ICC profile); seed-130 to seed-143 the autoregressive
// model's, the same way, and seed-150 to seed-163 the grouped checkerboard
// model's, alike.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec.h"
#include "plexus/codec/codec_model.h"
#include "plexus/checksum.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"

namespace {

using namespace plexus;

// The c_api_fuzzer target compiles this harness with PLEXUS_FUZZ_C_API=1:
// the same models and seeds, the input given to the C API (plexus/codec.h)
// instead of CodecModel.
#ifndef PLEXUS_FUZZ_C_API
#define PLEXUS_FUZZ_C_API 0
#endif
constexpr bool kThroughCApi = PLEXUS_FUZZ_C_API != 0;

ModelSpec fuzz_spec() {
  ModelSpec spec;
  spec.name = "fuzz";
  spec.add_input("image");
  spec.add_node(
      {"g_a", "Conv2d", {"image"}, {"y"}, {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"quantizer", "UniformNoise", {"y"}, {"y_hat"}});
  spec.add_node({"entropy_model", "FactorizedEntropyModel", {"y_hat"}, {"likelihoods"}});
  spec.add_node({"g_s",
                 "ConvTranspose2d",
                 {"y_hat"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"distortion", "MSELoss", {"x_hat", "image"}, {"mse"}});
  spec.add_node({"rate", "RateLoss", {"likelihoods", "image"}, {"bpp"}});
  return spec;
}

ModelSpec fuzz_hyperprior_spec() {
  ModelSpec spec;
  spec.name = "fuzz-hyperprior";
  spec.add_input("image");
  spec.add_node(
      {"g_a", "Conv2d", {"image"}, {"y"}, {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"h_a", "Conv2d", {"y"}, {"z"}, {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"hyper_quantizer", "UniformNoise", {"z"}, {"z_hat"}});
  spec.add_node({"hyper_entropy_model", "FactorizedEntropyModel", {"z_hat"}, {"z_likelihoods"}});
  spec.add_node({"h_s",
                 "ConvTranspose2d",
                 {"z_hat"},
                 {"h_s_out"},
                 {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"h_s_relu", "ReLU", {"h_s_out"}, {"scales"}});
  spec.add_node({"quantizer", "UniformNoise", {"y"}, {"y_hat"}});
  spec.add_node({"gaussian_conditional", "GaussianConditional", {"y_hat", "scales"}, {"likelihoods"}});
  spec.add_node({"g_s",
                 "ConvTranspose2d",
                 {"y_hat"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"distortion", "MSELoss", {"x_hat", "image"}, {"mse"}});
  spec.add_node({"rate", "RateLoss", {"likelihoods", "z_likelihoods", "image"}, {"bpp"}});
  return spec;
}

ModelSpec fuzz_mean_scale_spec() {
  ModelSpec spec;
  spec.name = "fuzz-mean-scale";
  spec.add_input("image");
  spec.add_node(
      {"g_a", "Conv2d", {"image"}, {"y"}, {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"h_a", "Conv2d", {"y"}, {"z"}, {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"hyper_quantizer", "UniformNoise", {"z"}, {"z_hat"}});
  spec.add_node({"hyper_entropy_model", "FactorizedEntropyModel", {"z_hat"}, {"z_likelihoods"}});
  spec.add_node({"h_s",
                 "ConvTranspose2d",
                 {"z_hat"},
                 {"h_s_out"},
                 {{"out_channels", 6}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"h_s_act", "LeakyReLU", {"h_s_out"}, {"h_s_leaky"}});
  spec.add_node({"h_s1", "Conv2d", {"h_s_leaky"}, {"gaussian_params"}, {{"out_channels", 8}, {"kernel", 1}}});
  spec.add_node({"split", "Split", {"gaussian_params"}, {"scales", "means"}, {{"sizes", {4, 4}}}});
  spec.add_node({"quantizer", "QuantizeAroundMean", {"y", "means"}, {"y_hat"}});
  spec.add_node({"gaussian_conditional", "GaussianConditional", {"y_hat", "scales", "means"}, {"likelihoods"}});
  spec.add_node({"g_s",
                 "ConvTranspose2d",
                 {"y_hat"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"distortion", "MSELoss", {"x_hat", "image"}, {"mse"}});
  spec.add_node({"rate", "RateLoss", {"likelihoods", "z_likelihoods", "image"}, {"bpp"}});
  return spec;
}

// The mean-scale model with gain units: a variable-rate model of 3 levels.
ModelSpec fuzz_variable_rate_spec() {
  ModelSpec mean_scale = fuzz_mean_scale_spec();
  ModelSpec spec;
  spec.name = "fuzz-variable-rate";
  for (const char* input : {"image", "level", "mse_weight"}) spec.add_input(input);
  const nlohmann::json gains{{"levels", 3}, {"init", {-0.5, 0.0, 0.5}}};
  const nlohmann::json inverse_gains{{"levels", 3}, {"init", {0.5, 0.0, -0.5}}};
  for (NodeSpec node : mean_scale.nodes) {
    if (node.name == "h_a") spec.add_node({"gain", "GainUnit", {"y", "level"}, {"y_gained"}, gains});
    if (node.name == "g_s")
      spec.add_node({"inverse_gain", "GainUnit", {"y_hat", "level"}, {"y_hat_ungained"}, inverse_gains});
    for (std::string& input : node.inputs) {
      if (input == "y" && (node.name == "h_a" || node.name == "quantizer")) input = "y_gained";
      if (input == "y_hat" && node.name == "g_s") input = "y_hat_ungained";
    }
    if (node.type == "MSELoss") node.inputs.push_back("mse_weight");
    spec.add_node(node);
  }
  return spec;
}

ModelSpec fuzz_channel_spec() {
  ModelSpec spec;
  spec.name = "fuzz-channel";
  spec.add_input("image");
  spec.add_node(
      {"g_a", "Conv2d", {"image"}, {"y"}, {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"y_split", "Split", {"y"}, {"y0", "y1"}, {{"sizes", {1, 3}}}});
  spec.add_node({"h_a", "Conv2d", {"y"}, {"z"}, {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  spec.add_node({"hyper_quantizer", "UniformNoise", {"z"}, {"z_hat"}});
  spec.add_node({"hyper_entropy_model", "FactorizedEntropyModel", {"z_hat"}, {"z_likelihoods"}});
  spec.add_node({"h_s",
                 "ConvTranspose2d",
                 {"z_hat"},
                 {"h_s_out"},
                 {{"out_channels", 6}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"h_s_act", "LeakyReLU", {"h_s_out"}, {"hyper"}});
  const std::vector<int> sizes{1, 3};
  std::vector<std::string> noisy, scales, means, decoded;
  for (int k = 0; k < 2; ++k) {
    const std::string n = std::to_string(k), c = "slice" + n;
    std::vector<std::string> support{"hyper"};
    if (k == 1) support.push_back("y_decoded0");
    std::string input = "hyper";
    if (k == 1) {
      spec.add_node({c + "_support", "Concat", support, {c + "_support_out"}});
      input = c + "_support_out";
    }
    spec.add_node({c + "_mean", "Conv2d", {input}, {"mean" + n}, {{"out_channels", sizes[k]}, {"kernel", 1}}});
    spec.add_node({c + "_scale", "Conv2d", {input}, {"scale" + n}, {{"out_channels", sizes[k]}, {"kernel", 1}}});
    spec.add_node({c + "_quantizer",
                   "QuantizeAroundMean",
                   {"y" + n, "mean" + n},
                   {"y_hat" + n, "y_rounded" + n},
                   {{"synthesis", "straight_through"}}});
    spec.add_node({c + "_lrp_support", "Concat", {input, "y_rounded" + n}, {c + "_lrp_in"}});
    spec.add_node(
        {c + "_lrp", "Conv2d", {c + "_lrp_in"}, {c + "_lrp_out"}, {{"out_channels", sizes[k]}, {"kernel", 1}}});
    spec.add_node({c + "_lrp_tanh", "Tanh", {c + "_lrp_out"}, {c + "_lrp_value"}, {{"scale", 0.5}}});
    spec.add_node({c + "_add", "Add", {"y_rounded" + n, c + "_lrp_value"}, {"y_decoded" + n}});
    noisy.push_back("y_hat" + n);
    scales.push_back("scale" + n);
    means.push_back("mean" + n);
    decoded.push_back("y_decoded" + n);
  }
  spec.add_node({"y_hat_join", "Concat", noisy, {"y_hat"}});
  spec.add_node({"scales_join", "Concat", scales, {"scales"}});
  spec.add_node({"means_join", "Concat", means, {"means"}});
  spec.add_node({"gaussian_conditional", "GaussianConditional", {"y_hat", "scales", "means"}, {"likelihoods"}});
  spec.add_node({"decoded_join", "Concat", decoded, {"y_decoded"}});
  spec.add_node({"g_s",
                 "ConvTranspose2d",
                 {"y_decoded"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}});
  spec.add_node({"distortion", "MSELoss", {"x_hat", "image"}, {"mse"}});
  spec.add_node({"rate", "RateLoss", {"likelihoods", "z_likelihoods", "image"}, {"bpp"}});
  return spec;
}

ModelSpec fuzz_checkerboard_spec() {
  ModelSpec spec;
  spec.name = "fuzz-checkerboard";
  spec.add_input("image");
  spec.codec = {{"type", "hyperprior"},
                {"z", {{"type", "factorized"}, {"entropy_model", "hyper_entropy_model"}}},
                {"y",
                 {{"type", "checkerboard"},
                  {"conditional", "gaussian_conditional"},
                  {"quantizer", "quantizer"},
                  {"context_input", "context_quantizer"},
                  {"anchor_mask", "anchor_mask"},
                  {"context_mask", "context_mask"}}}};
  for (NodeSpec node : fuzz_mean_scale_spec().nodes) {
    if (node.name == "h_s1") node.outputs = {"hyper_params"};
    if (node.name == "split") {
      spec.add_node({"context_quantizer", "UniformNoise", {"y"}, {"y_context"}});
      spec.add_node({"anchor_mask", "CheckerboardMask", {"y_context"}, {"y_anchors"}, {{"keep", "even"}}});
      spec.add_node(
          {"context", "Conv2d", {"y_anchors"}, {"context_out"}, {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}});
      spec.add_node({"context_mask", "CheckerboardMask", {"context_out"}, {"context_values"}, {{"keep", "odd"}}});
      spec.add_node({"parameters_join", "Concat", {"hyper_params", "context_values"}, {"joined"}});
      spec.add_node({"parameters", "Conv2d", {"joined"}, {"gaussian_params"}, {{"out_channels", 8}, {"kernel", 1}}});
    }
    spec.add_node(node);
  }
  return spec;
}

ModelSpec fuzz_grouped_checkerboard_spec() {
  ModelSpec spec;
  spec.name = "fuzz-grouped-checkerboard";
  spec.add_input("image");
  nlohmann::json groups = nlohmann::json::array();
  const std::vector<int> sizes{1, 3};
  for (NodeSpec node : fuzz_mean_scale_spec().nodes) {
    if (node.name == "split" || node.name == "quantizer" || node.name == "gaussian_conditional") continue;
    if (node.name == "h_s1") node.outputs = {"hyper_params"};
    if (node.name == "g_s") node.inputs = {"y_decoded"};
    spec.add_node(node);
    if (node.name != "h_s1") continue;
    spec.add_node({"y_split", "Split", {"y"}, {"y0", "y1"}, {{"sizes", sizes}}});
    for (int k = 0; k < 2; ++k) {
      const std::string n = std::to_string(k), g = "group" + n;
      spec.add_node({g + "_context_quantizer", "UniformNoise", {"y" + n}, {"y_context" + n}});
      spec.add_node({g + "_anchor_mask", "CheckerboardMask", {"y_context" + n}, {"y_anchors" + n}, {{"keep", "even"}}});
      spec.add_node({g + "_context",
                     "Conv2d",
                     {"y_anchors" + n},
                     {g + "_context_out"},
                     {{"out_channels", 2}, {"kernel", 3}, {"padding", 1}}});
      spec.add_node(
          {g + "_context_mask", "CheckerboardMask", {g + "_context_out"}, {g + "_context_values"}, {{"keep", "odd"}}});
      std::vector<std::string> parts{"hyper_params", g + "_context_values"};
      if (k == 1) parts.push_back("y_rounded0");
      spec.add_node({g + "_join", "Concat", parts, {g + "_joined"}});
      spec.add_node({g + "_parameters",
                     "Conv2d",
                     {g + "_joined"},
                     {g + "_params"},
                     {{"out_channels", 2 * sizes[k]}, {"kernel", 1}}});
      spec.add_node(
          {g + "_split", "Split", {g + "_params"}, {"scales" + n, "means" + n}, {{"sizes", {sizes[k], sizes[k]}}}});
      spec.add_node({g + "_quantizer",
                     "QuantizeAroundMean",
                     {"y" + n, "means" + n},
                     {"y_hat" + n, "y_rounded" + n},
                     {{"synthesis", "straight_through"}}});
      groups.push_back({{"quantizer", g + "_quantizer"},
                        {"context_input", g + "_context_quantizer"},
                        {"anchor_mask", g + "_anchor_mask"},
                        {"context_mask", g + "_context_mask"}});
    }
    spec.add_node({"y_hat_join", "Concat", {"y_hat0", "y_hat1"}, {"y_hat"}});
    spec.add_node({"scales_join", "Concat", {"scales0", "scales1"}, {"scales"}});
    spec.add_node({"means_join", "Concat", {"means0", "means1"}, {"means"}});
    spec.add_node({"gaussian_conditional", "GaussianConditional", {"y_hat", "scales", "means"}, {"likelihoods"}});
    spec.add_node({"decoded_join", "Concat", {"y_rounded0", "y_rounded1"}, {"y_decoded"}});
  }
  spec.codec = {{"type", "hyperprior"},
                {"z", {{"type", "factorized"}, {"entropy_model", "hyper_entropy_model"}}},
                {"y",
                 {{"type", "channel_groups"},
                  {"conditional", "gaussian_conditional"},
                  {"decoded", "decoded_join"},
                  {"groups", groups}}}};
  return spec;
}

ModelSpec fuzz_autoregressive_spec() {
  ModelSpec spec;
  spec.name = "fuzz-autoregressive";
  spec.add_input("image");
  spec.codec = {{"type", "hyperprior"},
                {"z", {{"type", "factorized"}, {"entropy_model", "hyper_entropy_model"}}},
                {"y",
                 {{"type", "autoregressive"},
                  {"conditional", "gaussian_conditional"},
                  {"quantizer", "quantizer"},
                  {"context_input", "context_quantizer"},
                  {"context", "context"}}}};
  for (NodeSpec node : fuzz_mean_scale_spec().nodes) {
    if (node.name == "h_s1") node.outputs = {"hyper_params"};
    if (node.name == "split") {
      spec.add_node({"context_quantizer", "UniformNoise", {"y"}, {"y_context"}});
      spec.add_node({"context",
                     "Conv2d",
                     {"y_context"},
                     {"context_values"},
                     {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}, {"mask", "A"}}});
      spec.add_node({"parameters_join", "Concat", {"hyper_params", "context_values"}, {"joined"}});
      spec.add_node({"parameters", "Conv2d", {"joined"}, {"gaussian_params"}, {{"out_channels", 8}, {"kernel", 1}}});
    }
    spec.add_node(node);
  }
  return spec;
}

// The weights of a model of `spec` (no coding tables: they are computed on load).
TensorFile model_file(const ModelSpec& spec) {
  const Registry registry = builtin_registry();
  Net net(spec, registry, codec::model_input_shapes(spec, Shape{1, 3, 4, 4}), DType::f32, Device::cpu(), 1);
  TensorFile file;
  for (const NamedParameter& named : net.parameters()) {
    std::vector<double> values = named.parameter->value.to_values();
    if (named.name == "g_a.weight" || named.name == "h_a.weight" || named.name == "h_s.weight" ||
        named.name == "h_s1.weight" || named.name == "slice0_mean.weight" || named.name == "slice1_mean.weight" ||
        named.name == "context.weight" || named.name == "parameters.weight" || named.name == "group0_context.weight" ||
        named.name == "group1_context.weight" || named.name == "group0_parameters.weight" ||
        named.name == "group1_parameters.weight")
      for (double& v : values) v *= 30;  // latents over many integers, scales over many table entries
    file.tensors[named.name] = Tensor::from_values(values, named.parameter->value.shape());
  }
  file.metadata["model_spec"] = spec.to_json().dump();
  return file;
}

std::unique_ptr<codec::CodecModel> make_model(const ModelSpec& spec) {
  const Registry registry = builtin_registry();
  auto model =
      std::make_unique<codec::CodecModel>(spec, model_file(spec), registry, Device::cpu(), spec.name + " model");
  model->set_max_pixels(64 * 64);
  if (model->rate_levels() > 0) model->set_rate_level(1.5);
  return model;
}

// The model of input mode `mode` (bits 2 to 6).
codec::CodecModel& model(std::uint8_t mode) {
  static std::unique_ptr<codec::CodecModel> autoregressive = make_model(fuzz_autoregressive_spec());
  if ((mode & 96) == 96) return *autoregressive;
  static std::unique_ptr<codec::CodecModel> checkerboard = make_model(fuzz_checkerboard_spec());
  static std::unique_ptr<codec::CodecModel> grouped_checkerboard = make_model(fuzz_grouped_checkerboard_spec());
  if (mode & 64) return (mode & 16) ? *grouped_checkerboard : *checkerboard;
  static std::unique_ptr<codec::CodecModel> variable_rate = make_model(fuzz_variable_rate_spec());
  if (mode & 32) return *variable_rate;
  static std::unique_ptr<codec::CodecModel> factorized = make_model(fuzz_spec());
  static std::unique_ptr<codec::CodecModel> scale_hyperprior = make_model(fuzz_hyperprior_spec());
  static std::unique_ptr<codec::CodecModel> mean_scale = make_model(fuzz_mean_scale_spec());
  static std::unique_ptr<codec::CodecModel> channel = make_model(fuzz_channel_spec());
  return (mode & 16) ? *channel : (mode & 8) ? *mean_scale : (mode & 4) ? *scale_hyperprior : *factorized;
}

// The C API's handle of the model of input mode `mode`: its file written to
// the temporary folder and opened with plexus_codec_open_file, so that it
// decodes the same files as model(mode).
plexus_codec_model* c_api_model(std::uint8_t mode) {
  // Closed at exit, so that the leak check sees every handle released.
  static std::map<std::string, std::unique_ptr<plexus_codec_model, void (*)(plexus_codec_model*)>> opened;
  const ModelSpec spec = (mode & 96) == 96 ? fuzz_autoregressive_spec()
                         : (mode & 64)     ? ((mode & 16) ? fuzz_grouped_checkerboard_spec() : fuzz_checkerboard_spec())
                         : (mode & 32)     ? fuzz_variable_rate_spec()
                         : (mode & 16)     ? fuzz_channel_spec()
                         : (mode & 8)      ? fuzz_mean_scale_spec()
                         : (mode & 4)      ? fuzz_hyperprior_spec()
                                           : fuzz_spec();
  auto known = opened.find(spec.name);
  if (known != opened.end()) return known->second.get();
  const std::string path = std::filesystem::temp_directory_path() /
                           ("plexus-c-api-fuzz-" + std::to_string(::getpid()) + "-" + spec.name + ".safetensors");
  save_safetensors(path, model_file(spec));
  plexus_codec_model* handle = nullptr;
  if (plexus_codec_open_file(path.c_str(), "cpu", &handle) != PLEXUS_CODEC_OK) {
    std::fprintf(stderr, "cannot open the fuzz model: %s\n", plexus_codec_last_error());
    std::abort();
  }
  std::filesystem::remove(path);
  opened.emplace(spec.name,
                 std::unique_ptr<plexus_codec_model, void (*)(plexus_codec_model*)>(handle, plexus_codec_close));
  if (plexus_codec_model_fingerprint(handle) != model(mode).fingerprint()) std::abort();
  return handle;
}

// The C API on the input: get_info, then decode into a buffer of the size
// get_info gives (64x64 when it refuses the file), as RGB or RGBA (bit 7).
// A status outside the enum, a refusal without a message, or a decode that
// succeeds where get_info refused, is a bug.
void fuzz_c_api(std::uint8_t mode, const std::vector<std::uint8_t>& bytes) {
  // An empty input as zero bytes at a valid address (NULL is an invalid argument, refused as such).
  static const std::uint8_t nothing = 0;
  const std::uint8_t* data = bytes.empty() ? &nothing : bytes.data();
  plexus_codec_info info{};
  const plexus_codec_status info_status = plexus_codec_get_info(data, bytes.size(), &info);
  if (info_status != PLEXUS_CODEC_OK && (info_status != PLEXUS_CODEC_BAD_FILE || !*plexus_codec_last_error()))
    std::abort();
  const bool known = info_status == PLEXUS_CODEC_OK;
  const std::size_t width = known ? info.width : 64, height = known ? info.height : 64;
  if (width * height > 64 * 64) return;  // a valid file of a larger image: the decoder's limits are not the point
  const std::size_t channels = (mode & 128) ? 4 : 3;
  std::vector<std::uint8_t> pixels(width * height * channels);
  plexus_codec_model* decoder = c_api_model(mode);
  const plexus_codec_status status =
      channels == 4
          ? plexus_codec_decode_rgba(decoder, data, bytes.size(), pixels.data(), pixels.size(), width * channels)
          : plexus_codec_decode_rgb(decoder, data, bytes.size(), pixels.data(), pixels.size(), width * channels);
  if (status == PLEXUS_CODEC_OK && !known) std::abort();
  if (status != PLEXUS_CODEC_OK &&
      (status < PLEXUS_CODEC_INVALID_ARGUMENT || status > PLEXUS_CODEC_INTERNAL_ERROR || !*plexus_codec_last_error()))
    std::abort();
  if (status == PLEXUS_CODEC_INTERNAL_ERROR || status == PLEXUS_CODEC_OUT_OF_MEMORY) std::abort();
}

// A version-5 file with an optional section of type 9 ("icc" and a few
// bytes) before its coded streams, the count raised and the checksum redone.
std::vector<std::uint8_t> with_optional_section(std::vector<std::uint8_t> bytes) {
  const std::uint8_t section[] = {9, 0, 0, 0, 6, 0, 0, 0, 'i', 'c', 'c', 1, 2, 3};
  bytes.insert(bytes.begin() + 38, std::begin(section), std::end(section));
  bytes[36] = static_cast<std::uint8_t>(bytes[36] + 1);
  const std::uint32_t crc = plexus::crc32(bytes.data(), bytes.size() - 4);
  for (int k = 0; k < 4; ++k) bytes[bytes.size() - 4 + k] = static_cast<std::uint8_t>(crc >> (8 * k));
  return bytes;
}

void write_seeds(const std::string& folder) {
  int index = 0;
  auto write = [&](std::uint8_t mode, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(folder + "/seed-" + std::to_string(index++), std::ios::binary);
    out.put(static_cast<char>(mode));
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  };
  const std::vector<std::pair<int, int>> sizes{{1, 1}, {8, 8}, {13, 7}, {32, 17}, {64, 64}};
  auto image_of = [](int width, int height) {
    data::Image image(width, height);
    for (std::size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<std::uint8_t>(i * 37 % 251);
    return image;
  };
  for (bool sectioned : {false, true})
    for (std::uint8_t kind : {0, 4, 8, 16, 32}) {
      codec::CodecModel& coder = model(kind);
      coder.set_format_version(sectioned ? codec::kSectionedVersion : codec::format_version(coder.kind()));
      for (const auto& [width, height] : sizes) {
        if (sectioned && width == 64) continue;  // the largest seeds only once, in the kinds' versions
        const std::vector<std::uint8_t> bytes = coder.compress(image_of(width, height));
        for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | kind), bytes);
      }
    }
  for (std::uint8_t kind : {0, 4, 8, 16, 32}) {
    const std::vector<std::uint8_t> bytes = with_optional_section(model(kind).compress(image_of(13, 7)));
    for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | kind), bytes);
  }
  // Files with an ICC profile section (a 132-byte header of an RGB profile, no tags).
  data::Image tagged = image_of(9, 5);
  tagged.icc_profile.assign(codec::kMinIccProfileBytes, 0);
  const std::uint8_t profile_header[] = {0, 0, 0,   132, 0,   0,   0,   0,   2,   0x10,
                                         0, 0, 'm', 'n', 't', 'r', 'R', 'G', 'B', ' '};
  std::copy(std::begin(profile_header), std::end(profile_header), tagged.icc_profile.begin());
  for (std::uint8_t kind : {0, 4, 8, 16, 32}) {
    const std::vector<std::uint8_t> bytes = model(kind).compress(tagged);
    for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | kind), bytes);
  }
  // The checkerboard model (version 5 only), after the seeds above so that their numbers stay.
  codec::CodecModel& checkerboard = model(64);
  std::vector<std::vector<std::uint8_t>> files;
  for (const auto& [width, height] : sizes) files.push_back(checkerboard.compress(image_of(width, height)));
  files.push_back(with_optional_section(checkerboard.compress(image_of(13, 7))));
  for (const std::vector<std::uint8_t>& bytes : files)
    for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | 64), bytes);
  for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | 64), checkerboard.compress(tagged));
  // The autoregressive model (version 5 only), the same way, from seed-130.
  index = 130;
  codec::CodecModel& autoregressive = model(96);
  files.clear();
  for (const auto& [width, height] : sizes) files.push_back(autoregressive.compress(image_of(width, height)));
  files.push_back(with_optional_section(autoregressive.compress(image_of(13, 7))));
  files.push_back(autoregressive.compress(tagged));
  for (const std::vector<std::uint8_t>& bytes : files)
    for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | 96), bytes);
  // The grouped checkerboard model (version 5 only), from seed 150.
  index = 150;
  codec::CodecModel& grouped = model(64 | 16);
  files.clear();
  for (const auto& [width, height] : sizes) files.push_back(grouped.compress(image_of(width, height)));
  files.push_back(with_optional_section(grouped.compress(image_of(13, 7))));
  files.push_back(grouped.compress(tagged));
  for (const std::vector<std::uint8_t>& bytes : files)
    for (std::uint8_t mode : {0, 3}) write(static_cast<std::uint8_t>(mode | 64 | 16), bytes);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One thread: libFuzzer runs one input at a time, and a pool of threads
  // per convolution only adds synchronisation (results do not depend on it).
  set_cpu_threads(1);
  for (std::uint8_t kind : {0, 4, 8, 16, 32, 64, 64 | 16, 96}) {
    model(kind);
    if (kThroughCApi) c_api_model(kind);
  }
  if (const char* folder = std::getenv("PLEXUS_FUZZ_WRITE_SEEDS")) write_seeds(folder);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  codec::CodecModel& decoder = model(mode);
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if ((mode & 1) && bytes.size() >= 16) {
    const std::uint64_t fingerprint = decoder.fingerprint();
    for (int k = 0; k < 8; ++k) bytes[8 + k] = static_cast<std::uint8_t>(fingerprint >> (8 * k));
  }
  if ((mode & 2) && bytes.size() >= 4) {
    const std::uint32_t crc = plexus::crc32(bytes.data(), bytes.size() - 4);
    for (int k = 0; k < 4; ++k) bytes[bytes.size() - 4 + k] = static_cast<std::uint8_t>(crc >> (8 * k));
  }
  if (kThroughCApi) return fuzz_c_api(mode, bytes), 0;
  try {
    const data::Image image = decoder.decompress(bytes.data(), bytes.size());
    if (image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3) std::abort();
  } catch (const plexus::Error&) {
    // A clear refusal is the expected outcome for most inputs.
  }
  return 0;
}

// Activations applied by the convolution or Add before them (Net::set_activation_fusion):
// which pairs fuse, that a fused net computes the unfused net's values and
// gradients (on the CPU bit for bit; on CUDA through every path of the
// convolution engine: the few-channel forward, the tap-major and flat
// gathers, the split-K sum, the transposed phases, the few-channel
// transposed pass, the im2col path), every parameter gradient of a fused net
// against f64 central differences of its loss (CPU and CUDA), and that an
// inference-only net fuses nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "framework/net_gradient_check.h"
#include "plexus/builtin_layers.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// a and c fuse (each read by its activation alone); e is read by r2 and by
// the Add (two readers: not fused); the Add's sum g fuses its ReLU; the
// transposed convolution's LeakyReLU has a negative slope (its sign flips:
// not fused); the ReLU on the model input has no producer; t4 -> r4 fuses a
// transposed convolution.
const char* kPairsSpec = R"({
  "name": "pairs",
  "inputs": ["image"],
  "nodes": [
    {"name": "c0", "type": "Conv2d", "inputs": ["image"], "outputs": ["a"],
     "params": {"out_channels": 4, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "r0", "type": "ReLU", "inputs": ["a"], "outputs": ["b"]},
    {"name": "c1", "type": "Conv2d", "inputs": ["b"], "outputs": ["c"],
     "params": {"out_channels": 4, "kernel": 3, "stride": 2, "padding": 1, "bias": false}},
    {"name": "l1", "type": "LeakyReLU", "inputs": ["c"], "outputs": ["d"], "params": {"negative_slope": 0.2}},
    {"name": "c2", "type": "Conv2d", "inputs": ["d"], "outputs": ["e"],
     "params": {"out_channels": 4, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "r2", "type": "ReLU", "inputs": ["e"], "outputs": ["f"]},
    {"name": "skip", "type": "Add", "inputs": ["e", "f"], "outputs": ["g"]},
    {"name": "r_skip", "type": "ReLU", "inputs": ["g"], "outputs": ["g2"]},
    {"name": "t3", "type": "ConvTranspose2d", "inputs": ["g2"], "outputs": ["h"],
     "params": {"out_channels": 4, "kernel": 3, "stride": 2, "padding": 1, "output_padding": 1}},
    {"name": "l3", "type": "LeakyReLU", "inputs": ["h"], "outputs": ["i"], "params": {"negative_slope": -0.5}},
    {"name": "t4", "type": "ConvTranspose2d", "inputs": ["i"], "outputs": ["j"],
     "params": {"out_channels": 3, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "r4", "type": "ReLU", "inputs": ["j"], "outputs": ["out"]},
    {"name": "r_in", "type": "ReLU", "inputs": ["image"], "outputs": ["image_relu"]},
    {"name": "sum", "type": "Add", "inputs": ["out", "image_relu"], "outputs": ["both"]},
    {"name": "loss", "type": "MSELoss", "inputs": ["both", "image"], "outputs": ["mse"]}
  ]
})";

// Every path of the CUDA convolution engine, each followed by an
// activation: the few-channel forward (3 -> 32), the tap-major gather
// (32 -> 48, no bias), im2col + cuBLAS (48 -> 8: few output channels), the
// flat gather (8 -> 24), a long K on a small image (split over blocks: 24 ->
// 64 at 4x4), the transposed phases (64 -> 32) and the few-channel
// transposed pass (32 -> 3); and a residual Add followed by a ReLU.
const char* kEnginePathsSpec = R"({
  "name": "engine_paths",
  "inputs": ["image"],
  "nodes": [
    {"name": "few", "type": "Conv2d", "inputs": ["image"], "outputs": ["a0"],
     "params": {"out_channels": 32, "kernel": 5, "stride": 2, "padding": 2}},
    {"name": "few_act", "type": "LeakyReLU", "inputs": ["a0"], "outputs": ["b0"], "params": {"negative_slope": 0.1}},
    {"name": "tap", "type": "Conv2d", "inputs": ["b0"], "outputs": ["a1"],
     "params": {"out_channels": 48, "kernel": 3, "stride": 1, "padding": 1, "bias": false}},
    {"name": "tap_act", "type": "ReLU", "inputs": ["a1"], "outputs": ["b1"]},
    {"name": "narrow", "type": "Conv2d", "inputs": ["b1"], "outputs": ["a2"],
     "params": {"out_channels": 8, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "narrow_act", "type": "ReLU", "inputs": ["a2"], "outputs": ["b2"]},
    {"name": "flat", "type": "Conv2d", "inputs": ["b2"], "outputs": ["a3"],
     "params": {"out_channels": 24, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "flat_act", "type": "LeakyReLU", "inputs": ["a3"], "outputs": ["b3"], "params": {"negative_slope": 0.2}},
    {"name": "split", "type": "Conv2d", "inputs": ["b3"], "outputs": ["a4"],
     "params": {"out_channels": 64, "kernel": 5, "stride": 2, "padding": 2}},
    {"name": "split_act", "type": "ReLU", "inputs": ["a4"], "outputs": ["b4"]},
    {"name": "phases", "type": "ConvTranspose2d", "inputs": ["b4"], "outputs": ["a5"],
     "params": {"out_channels": 32, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1}},
    {"name": "phases_act", "type": "LeakyReLU", "inputs": ["a5"], "outputs": ["b5"], "params": {"negative_slope": 0.3}},
    {"name": "residual", "type": "Add", "inputs": ["b0", "b5"], "outputs": ["r"]},
    {"name": "residual_act", "type": "ReLU", "inputs": ["r"], "outputs": ["b6"]},
    {"name": "onto_image", "type": "ConvTranspose2d", "inputs": ["b6"], "outputs": ["a6"],
     "params": {"out_channels": 3, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1}},
    {"name": "onto_image_act", "type": "ReLU", "inputs": ["a6"], "outputs": ["out"]},
    {"name": "loss", "type": "MSELoss", "inputs": ["out", "image"], "outputs": ["mse"]}
  ]
})";

using testing::expect_error;

// `count` values drawn uniformly from [-1, 1] (the same ones for equal seeds).
std::vector<double> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<double> values(count);
  for (double& v : values) v = value(rng);
  return values;
}

struct FusionNet {
  FusionNet(const char* spec, Shape image, DType dtype, Device device, bool fused, Precision precision = Precision::f32,
            DType storage = DType::f32)
      : net(ModelSpec::from_text(spec, "fusion.json"), registry, {{"image", image}}, dtype, device, 11), ctx(device) {
    if (device.is_cuda()) ctx.set_precision(precision);
    ctx.set_training(true);
    if (storage != DType::f32) net.set_activation_storage(storage);
    net.set_activation_fusion(fused);
    net.input("image").copy_from(Tensor::from_values(random_values(shape_numel(image), 3), image, dtype));
  }
  double loss() {
    net.forward(ctx);
    return net.scalar("mse");
  }
  void backward() {
    loss();
    net.zero_grad();
    net.backward(ctx, {{"mse", 1.0}});
  }
  std::map<std::string, std::vector<double>> parameter_grads() {
    std::map<std::string, std::vector<double>> grads;
    for (const NamedParameter& p : net.trainable_parameters()) grads[p.name] = p.parameter->grad.to_values();
    return grads;
  }
  Net net;
  Context ctx;
};

TEST(NetActivationFusion, FusesAnActivationWhoseInputOnlyItReadsAfterAConvolution) {
  FusionNet s(kPairsSpec, {2, 3, 8, 8}, DType::f64, Device::cpu(), /*fused=*/true);
  EXPECT_EQ(s.net.fused_activation_count(), 4u);  // r0, l1, r_skip, r4
  s.backward();
  expect_error<ConfigError>([&] { s.net.blob("a"); }, {"'a'", "'r0'", "'b'", "set_activation_fusion"});
  expect_error<ConfigError>([&] { s.net.blob("j"); }, {"'j'", "'r4'"});
  for (const char* kept : {"e", "h", "image"}) EXPECT_NO_THROW(s.net.blob(kept)) << kept;  // not fused
  // The fused blob's storage is the activation's output; its gradient is its own.
  EXPECT_EQ(s.net.blob_grad("a").shape(), s.net.blob_shape("a"));
  EXPECT_NE(s.net.blob_grad("a").raw_data(), s.net.blob_grad("b").raw_data());
  s.net.set_activation_fusion(false);
  EXPECT_EQ(s.net.fused_activation_count(), 0u);
  EXPECT_NO_THROW(s.net.blob("a"));
}

// Both nets' losses, blob gradients and parameter gradients, within
// `tolerance` of the largest magnitude of each (0: the same bits).
void expect_same_values(FusionNet& fused, FusionNet& plain, const std::vector<std::string>& blobs, double tolerance) {
  ASSERT_GT(fused.net.fused_activation_count(), 0u);
  fused.backward();
  plain.backward();
  const auto expect_near = [&](const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::abs(v));
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
      if (!(std::abs(a[k] - b[k]) <= tolerance * scale) && wrong++ < 3)
        ADD_FAILURE() << what << "[" << k << "]: fused " << a[k] << ", unfused " << b[k] << " (scale " << scale << ")";
  };
  expect_near({fused.net.scalar("mse")}, {plain.net.scalar("mse")}, "loss");
  for (const std::string& blob : blobs)
    expect_near(fused.net.blob_grad(blob).to_values(), plain.net.blob_grad(blob).to_values(), "d" + blob);
  const auto fused_grads = fused.parameter_grads(), plain_grads = plain.parameter_grads();
  ASSERT_EQ(fused_grads.size(), plain_grads.size());
  for (const auto& [name, grad] : plain_grads) expect_near(fused_grads.at(name), grad, name);
}

TEST(NetActivationFusion, SameValuesAndGradientsAsUnfusedCpu) {
  for (DType dtype : {DType::f64, DType::f32}) {
    FusionNet fused(kPairsSpec, {2, 3, 8, 8}, dtype, Device::cpu(), true);
    FusionNet plain(kPairsSpec, {2, 3, 8, 8}, dtype, Device::cpu(), false);
    ASSERT_EQ(plain.net.fused_activation_count(), 0u);
    expect_same_values(fused, plain, {"a", "b", "c", "g", "j", "image_relu"}, 0.0);
    EXPECT_EQ(fused.net.blob("out").to_values(), plain.net.blob("out").to_values());
  }
}

// Every element of every parameter gradient of the fused net against
// central differences of its loss (f64), over two passes.
void expect_gradients_match_central_differences(FusionNet& s) {
  ASSERT_GT(s.net.fused_activation_count(), 0u);
  test::expect_parameter_gradients_match_central_differences(
      s.net, [&] { return s.loss(); }, [&] { s.backward(); }, {/*step=*/1e-6, /*tolerance=*/1e-6, /*floor=*/1e-2});
}

TEST(NetActivationFusion, GradientsMatchCentralDifferencesCpu) {
  FusionNet s(kPairsSpec, {2, 3, 8, 8}, DType::f64, Device::cpu(), true);
  expect_gradients_match_central_differences(s);
}

TEST(NetActivationFusion, GradientsMatchCentralDifferencesCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  FusionNet s(kPairsSpec, {2, 3, 8, 8}, DType::f64, Device::cuda(), true);
  expect_gradients_match_central_differences(s);
}

TEST(NetActivationFusion, CpuAndCudaAgreeF64) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  FusionNet cuda(kPairsSpec, {2, 3, 8, 8}, DType::f64, Device::cuda(), true);
  FusionNet cpu(kPairsSpec, {2, 3, 8, 8}, DType::f64, Device::cpu(), true);
  expect_same_values(cuda, cpu, {"a", "c", "j"}, 1e-12);
}

// The engine's paths (kEnginePathsSpec) at TF32: the two nets run the same
// kernels on the same values, so only the bias gradients' atomic sums may
// differ, in their last bits.
TEST(NetActivationFusion, EveryEnginePathSameAsUnfusedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Precision precision : {Precision::tf32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(precision));
    FusionNet fused(kEnginePathsSpec, {2, 3, 16, 16}, DType::f32, Device::cuda(), true, precision);
    FusionNet plain(kEnginePathsSpec, {2, 3, 16, 16}, DType::f32, Device::cuda(), false, precision);
    EXPECT_EQ(fused.net.fused_activation_count(), 8u);
    ASSERT_EQ(plain.net.fused_activation_count(), 0u);
    expect_same_values(fused, plain, {"a0", "a1", "a2", "a3", "a4", "a5", "r", "a6"}, 1e-5);
    EXPECT_EQ(fused.net.blob("out").to_values(), plain.net.blob("out").to_values());
  }
}

// The largest relative difference (in each gradient's norm) of `net`'s
// parameter gradients from `reference`'s.
double largest_gradient_difference(FusionNet& net, FusionNet& reference) {
  const auto grads = net.parameter_grads(), reference_grads = reference.parameter_grads();
  double largest = 0;
  for (const auto& [name, expected] : reference_grads) {
    const std::vector<double>& grad = grads.at(name);
    double difference = 0, norm = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      difference += (grad[i] - expected[i]) * (grad[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    EXPECT_GT(norm, 0.0) << name << " has no gradient: the test compares nothing";
    largest = std::max(largest, std::sqrt(difference / norm));
  }
  return largest;
}

// bf16 storage: each fused blob takes its activation output's dtype, so
// where that output is f32 (read by two nodes) the convolution's output is
// no longer rounded to bf16, and a LeakyReLU's value is rounded once
// instead of twice. Against the same net with f32 storage, the fused net's
// loss and parameter gradients differ about as much as the unfused net's
// do: the rounding of bf16 blobs, grown through eight layers and their masks.
TEST(NetActivationFusion, Bf16StorageAsCloseToF32StorageAsUnfusedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Shape image{2, 3, 16, 16};
  FusionNet fused(kEnginePathsSpec, image, DType::f32, Device::cuda(), true, Precision::bf16, DType::bf16);
  FusionNet unfused(kEnginePathsSpec, image, DType::f32, Device::cuda(), false, Precision::bf16, DType::bf16);
  FusionNet f32(kEnginePathsSpec, image, DType::f32, Device::cuda(), false, Precision::bf16);
  EXPECT_EQ(fused.net.fused_activation_count(), 8u);
  EXPECT_EQ(fused.net.blob_dtype("a1"), DType::bf16);  // b1 is read by one convolution: bf16
  EXPECT_EQ(fused.net.blob_dtype("a0"), DType::f32);   // b0 is read by two nodes: f32
  for (FusionNet* s : {&fused, &unfused, &f32}) s->backward();
  const double loss = f32.net.scalar("mse");
  EXPECT_NEAR(fused.net.scalar("mse"), loss, 1e-2 * loss);
  EXPECT_NEAR(unfused.net.scalar("mse"), loss, 1e-2 * loss);
  const double fused_difference = largest_gradient_difference(fused, f32);
  const double unfused_difference = largest_gradient_difference(unfused, f32);
  EXPECT_GT(fused_difference, 0.0) << "no gradient changed: were the blobs stored in bf16?";
  EXPECT_LE(fused_difference, 1.5 * unfused_difference) << "unfused: " << unfused_difference;
  EXPECT_LE(fused_difference, 0.1);
}

TEST(NetActivationFusion, InferenceOnlyNetsFuseNothing) {
  FusionNet s(kPairsSpec, {2, 3, 8, 8}, DType::f32, Device::cpu(), true);
  const double fused_loss = s.loss();
  s.net.set_inference_only({"mse", "a"});
  EXPECT_EQ(s.net.fused_activation_count(), 0u);
  s.net.input("image").copy_from(Tensor::from_values(random_values(2 * 3 * 8 * 8, 3), {2, 3, 8, 8}, DType::f32));
  EXPECT_EQ(s.loss(), fused_loss);
  EXPECT_GT(s.net.blob("a").to_values().size(), 0u);
}

}  // namespace
}  // namespace plexus

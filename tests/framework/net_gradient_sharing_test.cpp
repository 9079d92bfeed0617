// Gradients a Net shares instead of copying (Net::backward): an Add's input
// read by nobody else shares dL/dy's storage, and the first contribution to
// a blob read several times is written into its gradient directly. Every
// parameter gradient of a graph with chained and doubled Adds, a blob read
// by an Add and a convolution, and scalar losses joined by an Add, against
// central differences of the whole weighted loss (f64, CPU; CUDA in f64 on a
// GPU), over two passes; and which gradients share storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "framework/net_gradient_check.h"
#include "plexus/builtin_layers.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// h is read by c1 and add1 (its first contribution comes from add1, the
// later reader); f and r1 each by one Add only (shared); r2 twice by one
// Add (not shared); total adds two scalar losses (not shared: backward
// sets the loss gradients itself).
const char* kSpec = R"({
  "name": "adds",
  "inputs": ["image"],
  "nodes": [
    {"name": "c0", "type": "Conv2d", "inputs": ["image"], "outputs": ["h"],
     "params": {"out_channels": 3, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "c1", "type": "Conv2d", "inputs": ["h"], "outputs": ["f"],
     "params": {"out_channels": 3, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "add1", "type": "Add", "inputs": ["h", "f"], "outputs": ["r1"]},
    {"name": "c2", "type": "Conv2d", "inputs": ["image"], "outputs": ["g"],
     "params": {"out_channels": 3, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "add2", "type": "Add", "inputs": ["r1", "g"], "outputs": ["r2"]},
    {"name": "twice", "type": "Add", "inputs": ["r2", "r2"], "outputs": ["s"]},
    {"name": "c3", "type": "Conv2d", "inputs": ["s"], "outputs": ["out"],
     "params": {"out_channels": 3, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "near", "type": "MSELoss", "inputs": ["out", "image"], "outputs": ["mse_a"]},
    {"name": "far", "type": "MSELoss", "inputs": ["s", "image"], "outputs": ["mse_b"]},
    {"name": "total", "type": "Add", "inputs": ["mse_a", "mse_b"], "outputs": ["loss"]}
  ]
})";

const std::map<std::string, double> kLossWeights{{"loss", 1.0}, {"mse_a", 0.5}};

struct AddsNet {
  explicit AddsNet(Device device)
      : net(ModelSpec::from_text(kSpec, "adds.json"), registry, {{"image", {2, 3, 4, 5}}}, DType::f64, device, 7),
        ctx(device) {
    std::vector<double> pixels(2 * 3 * 4 * 5);
    for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = std::sin(0.9 * static_cast<double>(k));
    net.input("image").copy_from(Tensor::from_values(pixels, {2, 3, 4, 5}, DType::f64));
  }
  // The weighted loss the gradients are of.
  double loss() {
    net.forward(ctx);
    double sum = 0;
    for (const auto& [name, weight] : kLossWeights) sum += weight * net.scalar(name);
    return sum;
  }
  void backward() {
    loss();
    net.zero_grad();
    net.backward(ctx, kLossWeights);
  }
  Net net;
  Context ctx;
};

// Every element of every parameter gradient against central differences, over two passes.
void expect_gradients_match_central_differences(AddsNet& s) {
  test::expect_parameter_gradients_match_central_differences(
      s.net, [&] { return s.loss(); }, [&] { s.backward(); }, {/*step=*/1e-5, /*tolerance=*/1e-6, /*floor=*/1.0});
}

TEST(NetGradientSharing, ParameterGradientsMatchCentralDifferencesCpu) {
  AddsNet s(Device::cpu());
  expect_gradients_match_central_differences(s);
}

TEST(NetGradientSharing, ParameterGradientsMatchCentralDifferencesCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  AddsNet s(Device::cuda());
  expect_gradients_match_central_differences(s);
}

TEST(NetGradientSharing, AnAddsOnlyInputSharesTheOutputGradient) {
  AddsNet s(Device::cpu());
  s.backward();
  const auto storage = [&](const std::string& blob) { return s.net.blob_grad(blob).raw_data(); };
  EXPECT_EQ(storage("f"), storage("r1"));   // f: read by add1 only
  EXPECT_EQ(storage("r1"), storage("r2"));  // r1: read by add2 only, whose output r2 ...
  EXPECT_EQ(storage("g"), storage("r2"));
  EXPECT_NE(storage("h"), storage("r1"));        // h: also read by c1
  EXPECT_NE(storage("r2"), storage("s"));        // r2: read twice by one Add
  EXPECT_NE(storage("mse_a"), storage("loss"));  // scalars: the losses' gradients are set by backward
  EXPECT_NE(storage("mse_b"), storage("loss"));
  // dL/dr2 = 2 dL/ds, and dL/dh = dL/dr1 + c1's contribution (not dL/dr1 alone).
  const std::vector<double> ds = s.net.blob_grad("s").to_values(), dr2 = s.net.blob_grad("r2").to_values();
  ASSERT_EQ(ds.size(), dr2.size());
  for (std::size_t k = 0; k < ds.size(); ++k) EXPECT_DOUBLE_EQ(dr2[k], 2 * ds[k]) << k;
  EXPECT_NE(s.net.blob_grad("h").to_values(), s.net.blob_grad("r1").to_values());
}

}  // namespace
}  // namespace plexus

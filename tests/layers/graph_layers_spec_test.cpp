// The graph layers inside a model spec written as JSON: a residual block, an
// attention gate (Cheng et al. 2020), channel slices and sub-pixel
// upsampling between convolutions. Shapes, gradients reaching every
// parameter, and one weight's gradient against central differences of the
// whole Net's loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

const char* kSpec = R"({
  "name": "graph-layers",
  "inputs": ["image"],
  "nodes": [
    {"name": "stem", "type": "Conv2d", "inputs": ["image"], "outputs": ["h"],
     "params": {"out_channels": 8, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "res_conv0", "type": "Conv2d", "inputs": ["h"], "outputs": ["res_a"],
     "params": {"out_channels": 8, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "res_act", "type": "LeakyReLU", "inputs": ["res_a"], "outputs": ["res_b"]},
    {"name": "res_conv1", "type": "Conv2d", "inputs": ["res_b"], "outputs": ["res_c"],
     "params": {"out_channels": 8, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "res_add", "type": "Add", "inputs": ["h", "res_c"], "outputs": ["r"]},
    {"name": "att_trunk", "type": "Conv2d", "inputs": ["r"], "outputs": ["trunk"],
     "params": {"out_channels": 8, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "att_mask", "type": "Conv2d", "inputs": ["r"], "outputs": ["mask"],
     "params": {"out_channels": 8, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "att_gate", "type": "Sigmoid", "inputs": ["mask"], "outputs": ["gate"]},
    {"name": "att_mul", "type": "Mul", "inputs": ["trunk", "gate"], "outputs": ["gated"]},
    {"name": "att_add", "type": "Add", "inputs": ["r", "gated"], "outputs": ["a"]},
    {"name": "slices", "type": "Split", "inputs": ["a"], "outputs": ["head", "tail"], "params": {"sizes": [3, 5]}},
    {"name": "head_act", "type": "LeakyReLU", "inputs": ["head"], "outputs": ["head_out"],
     "params": {"negative_slope": 0.2}},
    {"name": "joined", "type": "Concat", "inputs": ["head_out", "tail"], "outputs": ["c"]},
    {"name": "down", "type": "Conv2d", "inputs": ["c"], "outputs": ["d"],
     "params": {"out_channels": 12, "kernel": 3, "stride": 2, "padding": 1}},
    {"name": "up", "type": "PixelShuffle", "inputs": ["d"], "outputs": ["x_hat"], "params": {"upscale_factor": 2}},
    {"name": "distortion", "type": "MSELoss", "inputs": ["x_hat", "image"], "outputs": ["mse"]}
  ]
})";

struct SpecNet {
  Net net{ModelSpec::from_text(kSpec, "graph-layers.json"),
          registry,
          {{"image", {2, 3, 8, 8}}},
          DType::f64,
          Device::cpu(),
          21};
  Context ctx;

  SpecNet() {
    std::vector<double> pixels(2 * 3 * 8 * 8);
    for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = std::sin(0.7 * static_cast<double>(k));
    net.input("image").copy_from(Tensor::from_values(pixels, {2, 3, 8, 8}, DType::f64));
  }
  double loss() {
    net.forward(ctx);
    return net.scalar("mse");
  }
};

TEST(GraphLayersSpec, ShapesFlowThroughEveryLayer) {
  SpecNet s;
  s.loss();
  EXPECT_EQ(s.net.blob("head").shape(), (Shape{2, 3, 8, 8}));
  EXPECT_EQ(s.net.blob("tail").shape(), (Shape{2, 5, 8, 8}));
  EXPECT_EQ(s.net.blob("c").shape(), (Shape{2, 8, 8, 8}));
  EXPECT_EQ(s.net.blob("d").shape(), (Shape{2, 12, 4, 4}));
  EXPECT_EQ(s.net.blob("x_hat").shape(), (Shape{2, 3, 8, 8}));
}

TEST(GraphLayersSpec, EveryParameterGetsAGradient) {
  SpecNet s;
  s.loss();
  s.net.zero_grad();
  s.net.backward(s.ctx, {{"mse", 1.0}});
  for (const NamedParameter& p : s.net.trainable_parameters()) {
    double largest = 0;
    for (double g : p.parameter->grad.to_values()) largest = std::max(largest, std::abs(g));
    EXPECT_GT(largest, 0.0) << p.name;
  }
}

// The stem's weights reach the loss through every graph layer (both Add
// paths, the gate, both slices, the shuffle).
TEST(GraphLayersSpec, StemWeightGradientMatchesCentralDifferences) {
  SpecNet s;
  s.loss();
  s.net.zero_grad();
  s.net.backward(s.ctx, {{"mse", 1.0}});
  Parameter& weight = s.net.layer("stem").parameter("weight");
  std::vector<double> analytic = weight.grad.to_values();
  std::vector<double> values = weight.value.to_values();
  const double step = 1e-5;
  for (std::size_t k : {std::size_t{0}, values.size() / 2, values.size() - 1}) {
    auto loss_at = [&](double value) {
      std::vector<double> moved = values;
      moved[k] = value;
      weight.value.copy_from(Tensor::from_values(moved, weight.value.shape(), DType::f64));
      return s.loss();
    };
    double numeric = (loss_at(values[k] + step) - loss_at(values[k] - step)) / (2 * step);
    EXPECT_NEAR(analytic[k], numeric, 1e-6 * std::max({std::abs(analytic[k]), std::abs(numeric), 1.0})) << k;
  }
}

}  // namespace
}  // namespace plexus

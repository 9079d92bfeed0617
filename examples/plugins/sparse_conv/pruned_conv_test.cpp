// Tests of PrunedConv2d / PrunedConvTranspose2d through Plexus's public API:
// the built libsparse_conv.so is loaded like plexus-ae loads it. The pruning
// schedule and magnitude mask against hand computations; the forward
// against the built-in convolution run on weights masked here; gradient
// checks with a random mask (CPU f64; CUDA on a GPU) and CPU/CUDA parity;
// gradual pruning inside a Net trained with Adam (masked weights stay
// exactly zero, the sparsity follows the schedule, the mask survives a
// checkpoint); and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "plexus/checkpoint.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/plugin.h"
#include "plexus/testing/gtest_helpers.h"
#include "plugin_test_support.h"
#include "pruning_schedule.h"

namespace {

using plexus::Device;
using plexus::DType;
using plexus::Shape;
using plexus::Tensor;

const CudaProbe kCudaProbe{"PrunedConv2d", {{"out_channels", 1}, {"kernel", 1}, {"sparsity", 0.5}}};

// A mask of about half zeros; weights and biases as initialised.
void random_mask(const std::string& name, std::vector<double>& values, std::mt19937_64& rng) {
  if (name != "mask") return;
  std::bernoulli_distribution keep(0.5);
  for (double& value : values) value = keep(rng) ? 1.0 : 0.0;
}

struct Case {
  std::string type;
  nlohmann::json params;
  Shape input;
};

std::vector<Case> cases() {
  return {
      {"PrunedConv2d",
       {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"sparsity", 0.5}},
       {2, 3, 7, 6}},
      {"PrunedConv2d", {{"out_channels", 3}, {"kernel", 1}, {"bias", false}, {"sparsity", 0.5}}, {1, 5, 3, 4}},
      {"PrunedConvTranspose2d",
       {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}, {"sparsity", 0.9}},
       {2, 4, 3, 5}},
  };
}

// ---- the schedule and the mask, by hand ----

TEST(PruningSchedule, FollowsTheCubicRampOfZhuAndGupta) {
  sparse_conv::PruningSchedule s{0.8, 100, 1100, 250};
  EXPECT_EQ(s.sparsity_at(0), 0.0);
  EXPECT_EQ(s.sparsity_at(99), 0.0);
  EXPECT_EQ(s.sparsity_at(100), 0.0);
  EXPECT_NEAR(s.sparsity_at(600), 0.8 * (1 - 0.125), 1e-12);     // half way: (1 - 1/2)^3 = 1/8
  EXPECT_NEAR(s.sparsity_at(350), 0.8 * (1 - 0.421875), 1e-12);  // a quarter: (3/4)^3
  EXPECT_EQ(s.sparsity_at(1100), 0.8);
  EXPECT_EQ(s.sparsity_at(5000), 0.8);
  EXPECT_FALSE(s.prunes_at(99));
  EXPECT_TRUE(s.prunes_at(100));
  EXPECT_FALSE(s.prunes_at(101));
  EXPECT_TRUE(s.prunes_at(350));
  EXPECT_TRUE(s.prunes_at(1100));  // the end step, though not on the 250 grid
  EXPECT_FALSE(s.prunes_at(1101));
  sparse_conv::PruningSchedule once{0.5, 7, 7, 100};
  EXPECT_TRUE(once.prunes_at(7));
  EXPECT_FALSE(once.prunes_at(8));
  EXPECT_EQ(once.sparsity_at(7), 0.5);
}

TEST(PruningSchedule, MaskZeroesTheSmallestMagnitudesAndNeverRevives) {
  std::vector<double> weights{0.5, -0.1, 0.3, -0.05, 0.2, -0.7};
  std::vector<double> mask(6, 1.0);
  EXPECT_EQ(sparse_conv::prune_by_magnitude(weights, mask, 2.0 / 6.0), 2);
  EXPECT_EQ(mask, (std::vector<double>{1, 0, 1, 0, 1, 1}));
  // Index 5 was masked by someone else: it stays masked and counts as the smallest.
  mask = {1, 1, 1, 1, 1, 0};
  EXPECT_EQ(sparse_conv::prune_by_magnitude(weights, mask, 0.5), 3);
  EXPECT_EQ(mask, (std::vector<double>{1, 0, 1, 0, 1, 0}));
  // Sparsity 0 keeps what was masked.
  EXPECT_EQ(sparse_conv::prune_by_magnitude(weights, mask, 0.0), 3);
}

// ---- forward against the built-in layer on weights masked here ----

TEST(PrunedConv, ForwardIsTheBuiltInConvolutionOfTheMaskedWeights) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.type + " " + c.params.dump());
    auto pruned = plugin_registry().create(c.type, "p", c.params);
    nlohmann::json dense_params = c.params;
    dense_params.erase("sparsity");
    const std::string dense_type = c.type == "PrunedConv2d" ? "Conv2d" : "ConvTranspose2d";
    auto dense = plugin_registry().create(dense_type, "d", dense_params);
    const Shape out_shape = pruned->output_shapes({c.input})[0];
    ASSERT_EQ(out_shape, dense->output_shapes({c.input})[0]);
    pruned->create_parameters({c.input});
    dense->create_parameters({c.input});
    std::mt19937_64 rng(3);
    pruned->initialize_parameters(DType::f64, Device::cpu(), rng);
    dense->initialize_parameters(DType::f64, Device::cpu(), rng);
    std::vector<double> mask = pruned->parameter("mask").value.to_values();
    random_mask("mask", mask, rng);
    pruned->parameter("mask").value = Tensor::from_values(mask, pruned->parameter("mask").shape, DType::f64);
    std::vector<double> weight = pruned->parameter("weight").value.to_values();
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] *= mask[i];
    dense->parameter("weight").value = Tensor::from_values(weight, dense->parameter("weight").shape, DType::f64);
    if (c.params.value("bias", true)) dense->parameter("bias").value = pruned->parameter("bias").value.clone();

    std::vector<double> x_values(static_cast<std::size_t>(plexus::shape_numel(c.input)));
    std::uniform_real_distribution<double> u(-1, 1);
    for (double& v : x_values) v = u(rng);
    Tensor x = Tensor::from_values(x_values, c.input, DType::f64);
    Tensor y_pruned(out_shape, DType::f64), y_dense(out_shape, DType::f64);
    plexus::Context ctx;
    pruned->forward(ctx, {&x}, {&y_pruned});
    dense->forward(ctx, {&x}, {&y_dense});
    const std::vector<double> a = y_pruned.to_values(), b = y_dense.to_values();
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << i;
    // The stored weight is not changed by the forward: only its masked copy is.
    EXPECT_NE(pruned->parameter("weight").value.to_values(), weight);
  }
}

// ---- gradients ----

TEST(PrunedConv, GradientsCpu) {
  plexus::GradCheckOptions options;
  options.parameter_filler = random_mask;
  for (const Case& c : cases()) {
    auto result = plexus::check_gradients(plugin_registry(), c.type, c.params, {c.input}, Device::cpu(), options);
    EXPECT_TRUE(plexus::testing::gradients_match(result));
  }
}

TEST(PrunedConv, MaskedWeightsGetNoGradient) {
  const Case c = cases()[0];
  auto layer = plugin_registry().create(c.type, "p", c.params);
  const Shape out_shape = layer->output_shapes({c.input})[0];
  layer->create_parameters({c.input});
  std::mt19937_64 rng(5);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  std::vector<double> mask = layer->parameter("mask").value.to_values();
  random_mask("mask", mask, rng);
  layer->parameter("mask").value = Tensor::from_values(mask, layer->parameter("mask").shape, DType::f64);
  Tensor x = Tensor::from_values(std::vector<double>(plexus::shape_numel(c.input), 0.5), c.input, DType::f64);
  Tensor y(out_shape, DType::f64), dx(c.input, DType::f64);
  Tensor dy = Tensor::from_values(std::vector<double>(plexus::shape_numel(out_shape), 1.0), out_shape, DType::f64);
  plexus::Context ctx;
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  const std::vector<double> grad = layer->parameter("weight").grad.to_values();
  int kept_with_gradient = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    if (mask[i] == 0.0) {
      EXPECT_EQ(grad[i], 0.0) << i;
    } else {
      kept_with_gradient += grad[i] != 0.0;
    }
  }
  EXPECT_GT(kept_with_gradient, 0);
}

TEST(PrunedConv, GradientsCuda) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  plexus::GradCheckOptions options;
  options.parameter_filler = random_mask;
  for (const Case& c : cases()) {
    auto result = plexus::check_gradients(plugin_registry(), c.type, c.params, {c.input}, Device::cuda(), options);
    EXPECT_TRUE(plexus::testing::gradients_match(result));
  }
}

TEST(PrunedConv, ParityCpuCuda) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  plexus::ParityOptions options;
  options.parameter_filler = random_mask;
  for (const Case& c : cases()) {
    Shape bigger = c.input;
    bigger[0] = 3;
    bigger[2] += 9;
    bigger[3] += 4;
    EXPECT_TRUE(
        plexus::testing::outputs_match(plexus::check_parity(plugin_registry(), c.type, c.params, {bigger}, options)));
  }
}

// ---- pruning inside a Net trained with Adam ----

plexus::ModelSpec tiny_spec() {
  return plexus::ModelSpec::from_json(nlohmann::json::parse(R"({
    "name": "pruned-tiny",
    "inputs": ["x", "target"],
    "nodes": [
      {"name": "conv", "type": "PrunedConv2d", "inputs": ["x"], "outputs": ["y"],
       "params": {"out_channels": 4, "kernel": 3, "padding": 1,
                  "sparsity": 0.75, "start_step": 0, "end_step": 4, "prune_every": 2}},
      {"name": "loss", "type": "MSELoss", "inputs": ["y", "target"], "outputs": ["mse"]}
    ]})"));
}

int count_zeros(const Tensor& t) {
  int zeros = 0;
  for (double v : t.to_values()) zeros += v == 0.0;
  return zeros;
}

// Trains `net` for `steps` Adam updates on random data, calling after_update
// as plexus-ae train does; returns the number of zero weights after each.
std::vector<int> train(plexus::Net& net, plexus::Context& ctx, int steps) {
  plexus::Adam adam(0.05);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<int> zeros;
  for (int t = 1; t <= steps; ++t) {
    for (const char* input : {"x", "target"}) {
      Tensor& blob = net.input(input);
      std::vector<double> values(static_cast<std::size_t>(blob.numel()));
      for (double& v : values) v = u(rng);
      blob.copy_from(Tensor::from_values(values, blob.shape(), blob.dtype()).to(blob.device()));
    }
    net.zero_grad();
    net.forward(ctx);
    net.backward(ctx, {{"mse", 1.0}});
    adam.step(ctx, net.trainable_parameters());
    net.after_update(ctx, t);
    ctx.synchronize();
    const Tensor& weight = net.layer("conv").parameter("weight").value;
    const std::vector<double> w = weight.to_values();
    const std::vector<double> m = net.layer("conv").parameter("mask").value.to_values();
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (m[i] == 0.0) {
        EXPECT_EQ(w[i], 0.0) << "step " << t << " weight " << i;
      }
    }
    EXPECT_EQ(count_zeros(weight), count_zeros(net.layer("conv").parameter("mask").value)) << "step " << t;
    zeros.push_back(count_zeros(net.layer("conv").parameter("mask").value));
  }
  return zeros;
}

void check_gradual_pruning(Device device) {
  plexus::Context ctx(device, 1);
  plexus::Net net(tiny_spec(), plugin_registry(), {{"x", {2, 3, 6, 6}}, {"target", {2, 4, 6, 6}}}, DType::f32, device,
                  1);
  // The mask is a buffer: checkpointed with the parameters, not trained.
  bool mask_listed = false;
  for (const auto& named : net.parameters()) mask_listed |= named.name == "conv.mask";
  EXPECT_TRUE(mask_listed);
  for (const auto& named : net.trainable_parameters()) EXPECT_NE(named.name, "conv.mask");
  EXPECT_EQ(net.parameter_count(), 4 * 3 * 3 * 3 + 4);

  // 108 weights; s_2 = 0.75 (1 - (1/2)^3) = 0.65625 -> round(70.875) = 71 zeros;
  // s_4 = 0.75 -> 81 zeros; steps 1 and 3 prune nothing; 5 and 6 keep 81.
  const std::vector<int> zeros = train(net, ctx, 6);
  EXPECT_EQ(zeros, (std::vector<int>{0, 71, 71, 81, 81, 81}));

  // The mask and the zeros survive a checkpoint.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pruned_conv_test_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  plexus::save_checkpoint(path, net, nullptr, 6);
  plexus::Net reloaded(tiny_spec(), plugin_registry(), {{"x", {2, 3, 6, 6}}, {"target", {2, 4, 6, 6}}}, DType::f32,
                       device, 2);
  plexus::load_checkpoint(path, reloaded, nullptr);
  std::filesystem::remove(path);
  EXPECT_EQ(reloaded.layer("conv").parameter("mask").value.to_values(),
            net.layer("conv").parameter("mask").value.to_values());
  EXPECT_EQ(count_zeros(reloaded.layer("conv").parameter("weight").value), 81);
}

TEST(PrunedConv, GradualPruningWithAdamKeepsMaskedWeightsZeroCpu) { check_gradual_pruning(Device::cpu()); }

TEST(PrunedConv, GradualPruningWithAdamKeepsMaskedWeightsZeroCuda) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  check_gradual_pruning(Device::cuda());
}

// ---- errors ----

std::string config_error(const std::string& type, const nlohmann::json& params) {
  try {
    plugin_registry().create(type, "p", params);
  } catch (const plexus::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PrunedConv, RejectsBadParams) {
  EXPECT_EQ(config_error("PrunedConv2d", {{"out_channels", 4}, {"kernel", 3}, {"sparsity", 1.0}}),
            "node 'p' (PrunedConv2d): parameter 'sparsity' must be in [0, 1), got 1");
  EXPECT_EQ(config_error("PrunedConv2d",
                         {{"out_channels", 4}, {"kernel", 3}, {"sparsity", 0.5}, {"start_step", 10}, {"end_step", 5}}),
            "node 'p' (PrunedConv2d): parameter 'end_step' must be >= start_step (10), got 5");
  EXPECT_NE(config_error("PrunedConv2d", {{"out_channels", 4}, {"kernel", 3}}).find("'sparsity' is required"),
            std::string::npos);
  // The built-in layer's own checks still apply.
  EXPECT_NE(config_error("PrunedConvTranspose2d", {{"kernel", 3}, {"sparsity", 0.5}}).find("'out_channels'"),
            std::string::npos);
  EXPECT_NE(config_error("PrunedConv2d", {{"out_channels", 4}, {"kernel", 3}, {"sparsity", 0.5}, {"sparsty", 1}})
                .find("unknown parameter 'sparsty'"),
            std::string::npos);
}

}  // namespace

// Tests of the SimplifiedGDN plugin through Plexus's public API only: the
// built libsimplified_gdn.so is loaded like plexus-ae loads it, then
// gradient-checked (CPU; CUDA in f64 on a GPU), compared CPU vs CUDA, and
// its forward values, subgradient at 0, parameter bounds and error messages
// checked against hand computations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/plugin.h"
#include "plexus/testing/gtest_helpers.h"

namespace {

using plexus::Device;
using plexus::DType;
using plexus::Layer;
using plexus::Shape;
using plexus::Tensor;

const plexus::Registry& plugin_registry() {
  static const plexus::Registry registry = [] {
    plexus::Registry loaded = plexus::builtin_registry();
    plexus::load_plugin(SIMPLIFIED_GDN_PLUGIN, loaded);
    return loaded;
  }();
  return registry;
}

// The documented defaults: reparam_offset = 2^-18, pedestal = offset^2.
const double kReparamOffset = std::ldexp(1.0, -18);
const double kPedestal = kReparamOffset * kReparamOffset;

// Stored (reparametrised) values well above their bounds, so that the
// numeric differences never straddle the max() of the reparametrisation.
void dense_parameters(const std::string& name, std::vector<double>& values, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> beta(0.7, 1.3), gamma(0.05, 0.6);
  for (double& value : values) value = name == "beta" ? beta(rng) : gamma(rng);
}

plexus::GradCheckOptions check_options() {
  plexus::GradCheckOptions options;
  options.kink = 0.0;         // |x_j| is not differentiable at 0
  options.kink_range = 2e-5;  // > step: never difference across the kink
  options.parameter_filler = dense_parameters;
  return options;
}

// A layer on the CPU in f64 with its default (initial) parameters.
std::unique_ptr<Layer> make_layer(const std::string& type, const Shape& shape,
                                  const nlohmann::json& params = nlohmann::json::object()) {
  auto layer = plugin_registry().create(type, "s", params);
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(7);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  return layer;
}

void set_parameter(Layer& layer, const std::string& name, const std::vector<double>& values) {
  plexus::Parameter& parameter = layer.parameter(name);
  parameter.value = Tensor::from_values(values, parameter.shape, DType::f64);
}

std::vector<double> forward(Layer& layer, const std::vector<double>& x_values, const Shape& shape) {
  plexus::Context ctx;
  Tensor x = Tensor::from_values(x_values, shape, DType::f64);
  Tensor y(shape, DType::f64);
  layer.forward(ctx, {&x}, {&y});
  return y.to_values();
}

// Runs forward and backward with output gradient dy; returns dx.
std::vector<double> backward(Layer& layer, const std::vector<double>& x_values, const std::vector<double>& dy_values,
                             const Shape& shape) {
  plexus::Context ctx;
  Tensor x = Tensor::from_values(x_values, shape, DType::f64);
  Tensor y(shape, DType::f64);
  Tensor dy = Tensor::from_values(dy_values, shape, DType::f64);
  Tensor dx(shape, DType::f64);
  for (plexus::Parameter* parameter : layer.parameters()) parameter->grad.fill_zero();
  layer.forward(ctx, {&x}, {&y});
  layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  return dx.to_values();
}

bool plugin_has_cuda() {
  return plugin_registry()
      .create("SimplifiedGDN", "probe", nlohmann::json::object())
      ->traits(plexus::Device::cuda())
      .has_cuda;
}

#define SKIP_WITHOUT_CUDA()                                                     \
  if (!plexus::cuda_available()) GTEST_SKIP() << plexus::testing::kNoGpuReason; \
  if (!plugin_has_cuda()) GTEST_SKIP() << "the plugin was built without its CUDA kernels"

// Both directions share every property test.
class BothDirections : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(SimplifiedGDN, BothDirections, ::testing::Values("SimplifiedGDN", "SimplifiedIGDN"));

TEST_P(BothDirections, GradientsCpu) {
  // Batch > 1, ranks 2 to 4, a single channel, a single pixel.
  for (Shape shape : {Shape{2, 3, 4, 5}, Shape{1, 4, 3, 3}, Shape{3, 2}, Shape{2, 1, 7}, Shape{1, 3, 1, 1}}) {
    EXPECT_TRUE(plexus::testing::gradients_match(
        plexus::check_gradients(plugin_registry(), GetParam(), {}, {shape}, Device::cpu(), check_options())));
  }
}

TEST_P(BothDirections, GradientsCpuAtInitialParameters) {
  // Near the initial point beta = 1, gamma = 0.1 I. The off-diagonal entries
  // of gamma start exactly on their bound, a kink for central differences,
  // so they are moved just above it (gamma_ij = 4e-6).
  plexus::GradCheckOptions options = check_options();
  options.parameter_filler = [](const std::string& name, std::vector<double>& values, std::mt19937_64&) {
    if (name == "gamma")
      for (double& value : values) value = std::max(value, 2e-3);
  };
  EXPECT_TRUE(plexus::testing::gradients_match(
      plexus::check_gradients(plugin_registry(), GetParam(), {}, {{2, 3, 3, 3}}, Device::cpu(), options)));
}

// Every third input exactly 0, at the kink of |x|.
plexus::GradCheckOptions options_with_exact_zeros() {
  plexus::GradCheckOptions options = check_options();
  options.input_filler = [](int, std::vector<double>& values, std::mt19937_64&) {
    for (std::size_t e = 0; e < values.size(); e += 3) values[e] = 0.0;
  };
  return options;
}

TEST_P(BothDirections, GradientsCpuWithExactZeros) {
  // Inputs exactly at the kink are skipped; every other gradient, including
  // those whose n_i contains a |0|, must still match.
  plexus::GradCheckResult result = plexus::check_gradients(plugin_registry(), GetParam(), {}, {{2, 3, 2, 2}},
                                                           Device::cpu(), options_with_exact_zeros());
  EXPECT_TRUE(plexus::testing::gradients_match(result));
  EXPECT_EQ(result.skipped, 8) << "24 inputs, every third one is 0";
}

TEST_P(BothDirections, GradientsCudaWithExactZeros) {
  SKIP_WITHOUT_CUDA();
  plexus::GradCheckResult result = plexus::check_gradients(plugin_registry(), GetParam(), {}, {{2, 3, 2, 2}},
                                                           Device::cuda(), options_with_exact_zeros());
  EXPECT_TRUE(plexus::testing::gradients_match(result));
  EXPECT_EQ(result.skipped, 8);
}

TEST_P(BothDirections, GradientsCuda) {
  SKIP_WITHOUT_CUDA();
  for (Shape shape : {Shape{2, 3, 4, 5}, Shape{3, 2}, Shape{2, 1, 7}}) {
    EXPECT_TRUE(plexus::testing::gradients_match(
        plexus::check_gradients(plugin_registry(), GetParam(), {}, {shape}, Device::cuda(), check_options())));
  }
}

TEST_P(BothDirections, ParityCpuCuda) {
  SKIP_WITHOUT_CUDA();
  plexus::ParityOptions options;
  options.parameter_filler = dense_parameters;
  for (Shape shape : {Shape{4, 8, 16, 16}, Shape{2, 16, 5, 7}, Shape{3, 5}}) {
    EXPECT_TRUE(
        plexus::testing::outputs_match(plexus::check_parity(plugin_registry(), GetParam(), {}, {shape}, options)));
  }
}

// The parameter gradients are matrix products through plexus::cuda::gemm,
// which follows the Context's precision. Under tf32 and bf16 they must stay
// within each precision's norm-relative tolerance of the f64 CPU kernels, and
// bf16's error must be visibly larger than tf32's (bf16 rounds operands to 8
// significant bits, TF32 keeps 11), so BF16 silently running as TF32 fails.
double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double difference = 0.0, reference = 0.0;
  for (std::size_t e = 0; e < expected.size(); ++e) {
    difference += (actual[e] - expected[e]) * (actual[e] - expected[e]);
    reference += expected[e] * expected[e];
  }
  return actual.size() == expected.size() ? std::sqrt(difference / reference) : NAN;
}

// Gradients of beta and gamma (concatenated) after one backward on `device`
// in `dtype` at `precision`, with the given parameter values, x and dy.
std::vector<double> parameter_grads(const std::string& type, const Shape& shape,
                                    const std::vector<std::vector<double>>& values, const std::vector<double>& x,
                                    const std::vector<double>& dy, Device device, DType dtype,
                                    plexus::Precision precision) {
  auto layer = plugin_registry().create(type, "s", nlohmann::json::object());
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(1);
  layer->initialize_parameters(dtype, device, rng);
  std::vector<plexus::Parameter*> parameters = layer->parameters();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    parameters[p]->value = Tensor::from_values(values[p], parameters[p]->shape, dtype, device);
    parameters[p]->grad.fill_zero();
  }
  plexus::Context ctx(device);
  ctx.set_precision(precision);
  Tensor xt = Tensor::from_values(x, shape, dtype, device), y(shape, dtype, device);
  Tensor dyt = Tensor::from_values(dy, shape, dtype, device), dx(shape, dtype, device);
  layer->forward(ctx, {&xt}, {&y});
  layer->backward(ctx, {&xt}, {&y}, {&dyt}, {&dx});
  std::vector<double> grads;
  for (plexus::Parameter* parameter : parameters) {
    const std::vector<double> grad = parameter->grad.to_values();
    grads.insert(grads.end(), grad.begin(), grad.end());
  }
  return grads;
}

TEST_P(BothDirections, TensorCoreProductsCuda) {
  SKIP_WITHOUT_CUDA();
  const Shape shape{2, 24, 13, 11};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> x(static_cast<std::size_t>(plexus::shape_numel(shape))), dy(x.size());
  for (double& value : x) value = uniform(rng);
  for (double& value : dy) value = uniform(rng);
  auto probe = make_layer(GetParam(), shape);
  std::vector<std::vector<double>> values;
  for (plexus::Parameter* parameter : probe->parameters()) {
    values.emplace_back(static_cast<std::size_t>(plexus::shape_numel(parameter->shape)));
    dense_parameters(parameter->name, values.back(), rng);
  }
  const std::vector<double> reference =
      parameter_grads(GetParam(), shape, values, x, dy, Device::cpu(), DType::f64, plexus::Precision::f32);
  const double tf32 = relative_error(
      parameter_grads(GetParam(), shape, values, x, dy, Device::cuda(), DType::f32, plexus::Precision::tf32),
      reference);
  const double bf16 = relative_error(
      parameter_grads(GetParam(), shape, values, x, dy, Device::cuda(), DType::f32, plexus::Precision::bf16),
      reference);
  EXPECT_LT(tf32, 2e-3);
  EXPECT_LT(bf16, 1e-2);
  EXPECT_GT(bf16, 1.5 * tf32) << "bf16 products should round more than tf32 ones";
  std::cout << GetParam() << " parameter gradients, norm-relative error: tf32 " << tf32 << ", bf16 " << bf16 << "\n";
}

TEST_P(BothDirections, ForwardMatchesNaiveLoop) {
  const bool inverse = GetParam() == "SimplifiedIGDN";
  const Shape shape{2, 3, 2, 2};
  const std::int64_t images = 2, channels = 3, pixels = 4;
  auto layer = make_layer(GetParam(), shape);
  std::mt19937_64 rng(11);
  std::vector<double> stored_beta(3), stored_gamma(9), x(24);
  dense_parameters("beta", stored_beta, rng);
  dense_parameters("gamma", stored_gamma, rng);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  for (double& value : x) value = uniform(rng);
  set_parameter(*layer, "beta", stored_beta);
  set_parameter(*layer, "gamma", stored_gamma);

  std::vector<double> y = forward(*layer, x, shape);
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t p = 0; p < pixels; ++p)
      for (std::int64_t i = 0; i < channels; ++i) {
        // value = stored^2 - pedestal (the stored values are above their bounds)
        double norm = stored_beta[i] * stored_beta[i] - kPedestal;
        for (std::int64_t j = 0; j < channels; ++j)
          norm += (stored_gamma[i * channels + j] * stored_gamma[i * channels + j] - kPedestal) *
                  std::abs(x[(n * channels + j) * pixels + p]);
        const std::int64_t e = (n * channels + i) * pixels + p;
        EXPECT_NEAR(y[e], inverse ? x[e] * norm : x[e] / norm, 1e-12) << "element " << e;
      }
}

TEST(SimplifiedGDN, ForwardHandComputedAtInitialParameters) {
  // beta = 1, gamma = 0.1 I; one pixel x = (2, -3): n = (1.2, 1.3).
  auto gdn = make_layer("SimplifiedGDN", {1, 2, 1, 1});
  auto igdn = make_layer("SimplifiedIGDN", {1, 2, 1, 1});
  std::vector<double> y = forward(*gdn, {2.0, -3.0}, {1, 2, 1, 1});
  EXPECT_NEAR(y[0], 2.0 / 1.2, 1e-12);
  EXPECT_NEAR(y[1], -3.0 / 1.3, 1e-12);
  y = forward(*igdn, {2.0, -3.0}, {1, 2, 1, 1});
  EXPECT_NEAR(y[0], 2.4, 1e-12);
  EXPECT_NEAR(y[1], -3.9, 1e-12);
}

TEST(SimplifiedGDN, ForwardClosedFormForOneChannel) {
  // C = 1, beta = 1, gamma = 0.1, rank 3: y = x / (1 + 0.1|x|), and IGDN of
  // that z = y (1 + 0.1|y|) (IGDN is the inverse only approximately).
  auto gdn = make_layer("SimplifiedGDN", {1, 1, 3});
  auto igdn = make_layer("SimplifiedIGDN", {1, 1, 3});
  const std::vector<double> x{-1.5, 0.25, 4.0};
  std::vector<double> y = forward(*gdn, x, {1, 1, 3});
  std::vector<double> z = forward(*igdn, y, {1, 1, 3});
  for (std::size_t e = 0; e < x.size(); ++e) {
    double expected_y = x[e] / (1.0 + 0.1 * std::abs(x[e]));
    EXPECT_NEAR(y[e], expected_y, 1e-12);
    EXPECT_NEAR(z[e], expected_y * (1.0 + 0.1 * std::abs(expected_y)), 1e-12);
  }
}

TEST(SimplifiedGDN, SubgradientAtZeroUsesSignZero) {
  // One pixel x = (0, 0.5), beta = 1, gamma = 0.1 I, dy = (1, 1).
  // Channel 0: dx_0 = dy_0 / n_0 = 1 (the |x_0| term contributes sign(0) = 0).
  // Channel 1: d/dx [x / (1 + 0.1 x)] = 1 / (1 + 0.1 x)^2 = 1 / 1.1025 at x = 0.5;
  // IGDN: d/dx [x (1 + 0.1 x)] = 1 + 0.2 x = 1.1.
  const Shape shape{1, 2, 1, 1};
  std::vector<double> dx = backward(*make_layer("SimplifiedGDN", shape), {0.0, 0.5}, {1.0, 1.0}, shape);
  EXPECT_NEAR(dx[0], 1.0, 1e-12);
  EXPECT_NEAR(dx[1], 1.0 / 1.1025, 1e-12);
  dx = backward(*make_layer("SimplifiedIGDN", shape), {0.0, 0.5}, {1.0, 1.0}, shape);
  EXPECT_NEAR(dx[0], 1.0, 1e-12);
  EXPECT_NEAR(dx[1], 1.1, 1e-12);
}

TEST(SimplifiedGDN, InitialParametersAreStoredReparametrised) {
  auto layer = make_layer("SimplifiedGDN", {1, 3, 2, 2});
  std::vector<double> beta = layer->parameter("beta").value.to_values();
  std::vector<double> gamma = layer->parameter("gamma").value.to_values();
  for (double stored : beta) EXPECT_NEAR(stored * stored - kPedestal, 1.0, 1e-15);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double stored = gamma[i * 3 + j];
      EXPECT_NEAR(stored * stored - kPedestal, i == j ? 0.1 : 0.0, 1e-15) << i << "," << j;
    }
}

TEST(SimplifiedGDN, BoundPassesOnlyGradientsThatRaiseTheParameter) {
  // C = 1, x = 0.5, stored beta = 1, stored gamma = 0 (below its bound
  // 2^-18, so gamma = bound^2 - pedestal = 0 and n = 1 - pedestal).
  // dL/dgamma = t |x| with t = -dy x / n^2. For dy = 1 it is negative: a
  // descent step raises gamma, so it passes as 2 * bound * dL/dgamma.
  // For dy = -1 it is positive and is stopped: the stored gradient is 0.
  const Shape shape{1, 1, 1};
  auto layer = make_layer("SimplifiedGDN", shape);
  set_parameter(*layer, "beta", {1.0});
  set_parameter(*layer, "gamma", {0.0});
  const double norm = 1.0 - kPedestal;
  EXPECT_NEAR(forward(*layer, {0.5}, shape)[0], 0.5 / norm, 1e-15);

  backward(*layer, {0.5}, {1.0}, shape);
  const double gamma_value_grad = (-1.0 * 0.5 / (norm * norm)) * 0.5;
  EXPECT_NEAR(layer->parameter("gamma").grad.to_values()[0], 2.0 * kReparamOffset * gamma_value_grad, 1e-18);
  // beta is above its bound: dL/dbeta_stored = 2 * 1 * t.
  EXPECT_NEAR(layer->parameter("beta").grad.to_values()[0], 2.0 * (-0.5 / (norm * norm)), 1e-12);

  backward(*layer, {0.5}, {-1.0}, shape);
  EXPECT_EQ(layer->parameter("gamma").grad.to_values()[0], 0.0);
}

TEST(SimplifiedGDN, ParameterGradientsAccumulate) {
  const Shape shape{1, 2, 3};
  auto layer = make_layer("SimplifiedGDN", shape);
  const std::vector<double> x{0.3, -0.7, 1.1, -0.2, 0.9, 0.4}, dy{1, -1, 0.5, 2, 0.25, -0.5};
  backward(*layer, x, dy, shape);
  std::vector<double> once = layer->parameter("gamma").grad.to_values();
  plexus::Context ctx;
  Tensor xt = Tensor::from_values(x, shape, DType::f64), y(shape, DType::f64);
  Tensor dyt = Tensor::from_values(dy, shape, DType::f64);
  layer->backward(ctx, {&xt}, {&y}, {&dyt}, {nullptr});  // no input gradient wanted
  std::vector<double> twice = layer->parameter("gamma").grad.to_values();
  for (std::size_t e = 0; e < once.size(); ++e) EXPECT_NEAR(twice[e], 2.0 * once[e], 1e-14);
}

void expect_config_error(const nlohmann::json& params, const std::string& expected) {
  try {
    make_layer("SimplifiedGDN", {1, 2, 2, 2}, params);
    FAIL() << "expected a ConfigError containing: " << expected;
  } catch (const plexus::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(SimplifiedGDN, RejectsBadParams) {
  expect_config_error({{"beta_min", 0}}, "node 's' (SimplifiedGDN): parameter 'beta_min' must be a finite number > 0");
  expect_config_error({{"gamma_init", -0.5}}, "parameter 'gamma_init' must be a finite number >= 0, got -0.5");
  expect_config_error({{"reparam_offset", 0.0}}, "parameter 'reparam_offset' must be a finite number > 0, got 0");
  expect_config_error({{"beta_min", "small"}}, "parameter 'beta_min' must be a number, got \"small\"");
  expect_config_error({{"gama_init", 0.1}},
                      "node 's' (SimplifiedGDN): unknown parameter 'gama_init'; SimplifiedGDN takes: "
                      "beta_min, gamma_init, reparam_offset");
}

void expect_shape_error(Layer& layer, const std::vector<Shape>& inputs, const std::string& expected) {
  try {
    layer.output_shapes(inputs);
    FAIL() << "expected a ShapeError containing: " << expected;
  } catch (const plexus::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(SimplifiedGDN, RejectsBadShapes) {
  auto fresh = plugin_registry().create("SimplifiedIGDN", "g", nlohmann::json::object());
  expect_shape_error(*fresh, {{5}},
                     "node 'g' (SimplifiedIGDN): expects an input [N, C, ...] of rank >= 2 (channel axis 1), got [5]");
  expect_shape_error(*fresh, {{1, 2}, {1, 2}}, "takes 1 input, got 2");
  expect_shape_error(*fresh, {{1, 0, 4}}, "needs at least 1 channel, got input [1, 0, 4]");
  auto built = make_layer("SimplifiedGDN", {1, 3, 4, 4});
  expect_shape_error(*built, {{1, 5, 4, 4}}, "has parameters for 3 channels, got input [1, 5, 4, 4] with 5");
}

TEST(SimplifiedGDN, Bls2017SpecBuildsAndTrainsOneStep) {
  plexus::ModelSpec spec = plexus::ModelSpec::from_file(SIMPLIFIED_GDN_SOURCE_DIR "/bls2017-sgdn.json");
  for (const plexus::NodeSpec& node : spec.nodes)
    if (!plugin_registry().contains(node.type))
      GTEST_SKIP() << "built-in layer " << node.type << " is not in this Plexus build";
  plexus::Net net(spec, plugin_registry(), {{"image", {2, 3, 32, 32}}}, DType::f32, Device::cpu(), 5);
  plexus::Context ctx(Device::cpu(), 5);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> pixel(0.0, 1.0);
  std::vector<double> image(2 * 3 * 32 * 32);
  for (double& value : image) value = pixel(rng);
  net.input("image").copy_from(Tensor::from_values(image, {2, 3, 32, 32}));
  net.forward(ctx);
  EXPECT_TRUE(std::isfinite(net.scalar("mse")));
  EXPECT_GT(net.scalar("bpp"), 0.0);
  net.zero_grad();
  net.backward(ctx, {{"mse", 1.0}, {"bpp", 1.0}});
  for (const plexus::NamedParameter& named : net.parameters())
    for (double value : named.parameter->grad.to_values()) ASSERT_TRUE(std::isfinite(value)) << named.name;
}

}  // namespace

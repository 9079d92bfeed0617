// LayerNorm and GroupNorm: forward and backward worked by hand on tiny
// inputs, a naive reference on random ones, gradient checks for the input
// and gamma/beta (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, both inside a
// Net built from JSON, the params each type lists, and errors for bad params
// and shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// A layer of `type` for x of `shape` (f64, CPU), with gamma and beta set when given.
std::unique_ptr<Layer> make_layer(const std::string& type, const nlohmann::json& params, const Shape& shape,
                                  const std::vector<double>& gamma = {}, const std::vector<double>& beta = {}) {
  auto layer = registry.create(type, "norm", params);
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(5);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  if (!gamma.empty()) layer->parameter("gamma").value = Tensor::from_values(gamma, {shape[1]}, DType::f64);
  if (!beta.empty()) layer->parameter("beta").value = Tensor::from_values(beta, {shape[1]}, DType::f64);
  return layer;
}

std::vector<double> forward(Layer& layer, const std::vector<double>& x, const Shape& shape) {
  Context ctx;
  Tensor tx = Tensor::from_values(x, shape, DType::f64);
  Tensor y(shape, DType::f64);
  layer.forward(ctx, {&tx}, {&y});
  return y.to_values();
}

// dx after a backward with output gradient dy.
std::vector<double> backward(Layer& layer, const std::vector<double>& x, const std::vector<double>& dy,
                             const Shape& shape) {
  Context ctx;
  Tensor tx = Tensor::from_values(x, shape, DType::f64);
  Tensor y(shape, DType::f64);
  Tensor tdy = Tensor::from_values(dy, shape, DType::f64);
  Tensor dx = Tensor::from_values(std::vector<double>(x.size(), 7.0), shape, DType::f64);  // overwritten
  layer.forward(ctx, {&tx}, {&y});
  layer.backward(ctx, {&tx}, {&y}, {&tdy}, {&dx});
  return dx.to_values();
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t j = 0; j < actual.size(); ++j) EXPECT_NEAR(actual[j], expected[j], tolerance) << "element " << j;
}

// ---- worked by hand ----

// x [1, 2, 1, 2] (C = 2, two pixels), eps = 3 so that r comes out round:
//   pixel 0: channels (1, 3): mu 2, var 1, r = 1/sqrt(1 + 3) = 1/2, xhat (-1/2, 1/2)
//   pixel 1: channels (4, 4): mu 4, var 0, r = 1/sqrt(3),         xhat (0, 0)
// gamma (2, 0.5), beta (1, -1):
//   y channel 0: (2 * -1/2 + 1, 0 + 1) = (0, 1);  channel 1: (0.5 * 1/2 - 1, 0 - 1) = (-0.75, -1)
const Shape kTinyShape{1, 2, 1, 2};
const std::vector<double> kTinyLayerNormX = {1, 4, /**/ 3, 4};

TEST(LayerNorm, ForwardByHand) {
  auto layer = make_layer("LayerNorm", {{"eps", 3.0}}, kTinyShape, {2, 0.5}, {1, -1});
  expect_near_all(forward(*layer, kTinyLayerNormX, kTinyShape), {0, 1, /**/ -0.75, -1});
}

// dy channel 0 (1, 2), channel 1 (0, -1); g = dy gamma; dx = r (g - mean g - xhat mean(g xhat)):
//   pixel 0: g (2, 0), mean g 1, mean(g xhat) = (2 * -1/2 + 0) / 2 = -1/2
//            dx = 1/2 (2 - 1 - 1/4) = 3/8,  1/2 (0 - 1 + 1/4) = -3/8
//   pixel 1: g (4, -0.5), mean g 1.75, xhat 0: dx = (2.25, -2.25) / sqrt(3)
//   dgamma = sum dy xhat = (1 * -1/2 + 2 * 0, 0 * 1/2 + -1 * 0) = (-1/2, 0),  dbeta = sum dy = (3, -1),
//   added to gradients that held (1, 1) and (1, 1) before.
TEST(LayerNorm, BackwardByHand) {
  auto layer = make_layer("LayerNorm", {{"eps", 3.0}}, kTinyShape, {2, 0.5}, {1, -1});
  layer->parameter("gamma").grad = Tensor::from_values({1, 1}, {2}, DType::f64);
  layer->parameter("beta").grad = Tensor::from_values({1, 1}, {2}, DType::f64);
  const double s = 2.25 / std::sqrt(3.0);
  expect_near_all(backward(*layer, kTinyLayerNormX, {1, 2, /**/ 0, -1}, kTinyShape), {0.375, s, /**/ -0.375, -s});
  expect_near_all(layer->parameter("gamma").grad.to_values(), {0.5, 1});
  expect_near_all(layer->parameter("beta").grad.to_values(), {4, 0});
}

TEST(LayerNorm, WithoutAffineHasNoParametersAndGivesXhat) {
  auto layer = make_layer("LayerNorm", {{"eps", 3.0}, {"elementwise_affine", false}}, kTinyShape);
  EXPECT_TRUE(layer->parameters().empty());
  expect_near_all(forward(*layer, kTinyLayerNormX, kTinyShape), {-0.5, 0, /**/ 0.5, 0});
}

TEST(LayerNorm, InitialGammaIsOneAndBetaZero) {
  auto layer = make_layer("LayerNorm", nlohmann::json::object(), {2, 3, 4, 4});
  EXPECT_EQ(layer->parameter("gamma").shape, (Shape{3}));
  EXPECT_EQ(layer->parameter("gamma").value.to_values(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(layer->parameter("beta").value.to_values(), (std::vector<double>{0, 0, 0}));
}

// x [1, 2, 1, 2], one group (all 4 values), eps = 4:
//   values (1, 3 | 5, 7): mu 4, var (9 + 1 + 1 + 9) / 4 = 5, r = 1/sqrt(9) = 1/3,
//   xhat (-1, -1/3 | 1/3, 1); gamma (2, 0.5), beta (1, -1):
//   y = (-2 + 1, -2/3 + 1 | 1/6 - 1, 1/2 - 1) = (-1, 1/3 | -5/6, -1/2)
const std::vector<double> kTinyGroupNormX = {1, 3, /**/ 5, 7};

TEST(GroupNorm, ForwardByHand) {
  auto layer = make_layer("GroupNorm", {{"groups", 1}, {"eps", 4.0}}, kTinyShape, {2, 0.5}, {1, -1});
  expect_near_all(forward(*layer, kTinyGroupNormX, kTinyShape), {-1, 1.0 / 3, /**/ -5.0 / 6, -0.5});
}

// dy (1, 2 | 0, -1): g = dy gamma = (2, 4 | 0, -0.5), mean g = 11/8,
// mean(g xhat) = (-2 - 4/3 + 0 - 1/2) / 4 = -23/24; dx = 1/3 (g - 11/8 + 23/24 xhat):
//   (1/3)(2 - 11/8 - 23/24) = -1/9,  (1/3)(4 - 11/8 - 23/72) = 83/108,
//   (1/3)(0 - 11/8 + 23/72) = -19/54, (1/3)(-1/2 - 11/8 + 23/24) = -11/36
// dgamma = (1 * -1 + 2 * -1/3, 0 * 1/3 + -1 * 1) = (-5/3, -1), dbeta = (3, -1).
TEST(GroupNorm, BackwardByHand) {
  auto layer = make_layer("GroupNorm", {{"groups", 1}, {"eps", 4.0}}, kTinyShape, {2, 0.5}, {1, -1});
  expect_near_all(backward(*layer, kTinyGroupNormX, {1, 2, /**/ 0, -1}, kTinyShape),
                  {-1.0 / 9, 83.0 / 108, /**/ -19.0 / 54, -11.0 / 36});
  expect_near_all(layer->parameter("gamma").grad.to_values(), {-5.0 / 3, -1});
  expect_near_all(layer->parameter("beta").grad.to_values(), {3, -1});
}

// Two groups of one channel each: every channel is normalised over its own pixels.
TEST(GroupNorm, GroupsNormaliseSeparately) {
  auto layer = make_layer("GroupNorm", {{"groups", 2}, {"eps", 3.0}, {"affine", false}}, kTinyShape);
  EXPECT_TRUE(layer->parameters().empty());
  // channel 0 (1, 3): mu 2, var 1, r 1/2; channel 1 (5, 5): var 0, xhat 0
  expect_near_all(forward(*layer, {1, 3, /**/ 5, 5}, kTinyShape), {-0.5, 0.5, /**/ 0, 0});
}

// ---- against a naive reference on random inputs ----

std::vector<double> random_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<double> values(n);
  for (double& v : values) v = dist(rng);
  return values;
}

// y by the definition: for every set, its mean and biased variance by plain loops.
// `group_channels` 0: LayerNorm (a set per pixel); else GroupNorm.
std::vector<double> naive_forward(const std::vector<double>& x, const Shape& shape, std::int64_t group_channels,
                                  double eps, const std::vector<double>& gamma, const std::vector<double>& beta) {
  const std::int64_t n_images = shape[0], channels = shape[1];
  const std::int64_t pixels = shape_numel(shape) / (n_images * channels);
  auto at = [&](std::int64_t n, std::int64_t c, std::int64_t p) {
    return static_cast<std::size_t>((n * channels + c) * pixels + p);
  };
  std::vector<double> y(x.size());
  auto normalise = [&](const std::vector<std::size_t>& set) {
    double mean = 0, var = 0;
    for (std::size_t e : set) mean += x[e];
    mean /= static_cast<double>(set.size());
    for (std::size_t e : set) var += (x[e] - mean) * (x[e] - mean);
    var /= static_cast<double>(set.size());
    for (std::size_t e : set) {
      const std::size_t c = e / static_cast<std::size_t>(pixels) % static_cast<std::size_t>(channels);
      y[e] = (x[e] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
    }
  };
  for (std::int64_t n = 0; n < n_images; ++n) {
    if (group_channels == 0) {
      for (std::int64_t p = 0; p < pixels; ++p) {
        std::vector<std::size_t> set;
        for (std::int64_t c = 0; c < channels; ++c) set.push_back(at(n, c, p));
        normalise(set);
      }
    } else {
      for (std::int64_t first = 0; first < channels; first += group_channels) {
        std::vector<std::size_t> set;
        for (std::int64_t c = first; c < first + group_channels; ++c)
          for (std::int64_t p = 0; p < pixels; ++p) set.push_back(at(n, c, p));
        normalise(set);
      }
    }
  }
  return y;
}

TEST(LayerNorm, MatchesNaiveReference) {
  std::mt19937_64 rng(11);
  // 300 pixels: two CPU blocks of 256, the second partial.
  for (Shape shape : {Shape{2, 5, 3, 100}, Shape{4, 7}, Shape{1, 3, 10}}) {
    const std::vector<double> x = random_values(static_cast<std::size_t>(shape_numel(shape)), rng);
    const std::vector<double> gamma = random_values(static_cast<std::size_t>(shape[1]), rng);
    const std::vector<double> beta = random_values(static_cast<std::size_t>(shape[1]), rng);
    auto layer = make_layer("LayerNorm", {{"eps", 1e-6}}, shape, gamma, beta);
    expect_near_all(forward(*layer, x, shape), naive_forward(x, shape, 0, 1e-6, gamma, beta), 1e-10);
  }
}

TEST(GroupNorm, MatchesNaiveReference) {
  std::mt19937_64 rng(12);
  struct Case {
    Shape shape;
    std::int64_t groups;
  };
  for (const Case& c : {Case{{2, 6, 4, 5}, 3}, Case{{3, 8}, 2}, Case{{2, 4, 7}, 4}, Case{{1, 6, 2, 2}, 1}}) {
    const std::vector<double> x = random_values(static_cast<std::size_t>(shape_numel(c.shape)), rng);
    const std::vector<double> gamma = random_values(static_cast<std::size_t>(c.shape[1]), rng);
    const std::vector<double> beta = random_values(static_cast<std::size_t>(c.shape[1]), rng);
    auto layer = make_layer("GroupNorm", {{"groups", c.groups}}, c.shape, gamma, beta);
    expect_near_all(forward(*layer, x, c.shape), naive_forward(x, c.shape, c.shape[1] / c.groups, 1e-5, gamma, beta),
                    1e-10);
  }
}

// ---- gradient checks and parity ----

// gamma and beta off their 1 and 0 start, so that a backward that forgets
// gamma, or mixes up channels, shows.
void spread_affine(const std::string& name, std::vector<double>& values, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(name == "gamma" ? 0.5 : -1.0, name == "gamma" ? 1.5 : 1.0);
  for (double& v : values) v = dist(rng) * (name == "gamma" && rng() % 2 ? -1.0 : 1.0);
}

GradCheckOptions gradient_options() {
  GradCheckOptions options;
  options.parameter_filler = spread_affine;
  return options;
}

struct GradientCase {
  nlohmann::json params;
  Shape x;
};

// LayerNorm: 4-D, rank 2 and rank 3; C above the CUDA kernels' 8 channel
// slices and P past one 32-pixel tile; eps 1e-6; no affine map.
const std::vector<GradientCase> kLayerNormCases = {
    {nlohmann::json::object(), {2, 3, 4, 5}},        {{{"eps", 1e-6}}, {3, 5}},
    {nlohmann::json::object(), {2, 11, 3, 3}},       {nlohmann::json::object(), {1, 4, 40}},
    {{{"elementwise_affine", false}}, {2, 3, 2, 3}},
};

// GroupNorm: groups of several channels, one group, one channel per group
// (instance norm), rank 2 and 3, no affine map.
const std::vector<GradientCase> kGroupNormCases = {
    {{{"groups", 2}}, {2, 4, 3, 3}}, {{{"groups", 1}, {"eps", 1e-6}}, {2, 3, 2, 2}},
    {{{"groups", 6}}, {1, 6, 2, 3}}, {{{"groups", 3}}, {3, 6}},
    {{{"groups", 2}}, {2, 4, 5}},    {{{"groups", 2}, {"affine", false}}, {2, 4, 2, 2}},
};

void check_cases(const std::string& type, const std::vector<GradientCase>& cases, Device device) {
  for (const GradientCase& c : cases)
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, type, c.params, {c.x}, device, gradient_options())))
        << type << " " << c.params.dump() << " " << shape_str(c.x);
}

TEST(LayerNorm, GradientsCpu) { check_cases("LayerNorm", kLayerNormCases, Device::cpu()); }

TEST(LayerNorm, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  check_cases("LayerNorm", kLayerNormCases, Device::cuda());
}

TEST(GroupNorm, GradientsCpu) { check_cases("GroupNorm", kGroupNormCases, Device::cpu()); }

TEST(GroupNorm, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  check_cases("GroupNorm", kGroupNormCases, Device::cuda());
}

ParityOptions parity_options(DType dtype) {
  ParityOptions options;
  options.dtype = dtype;
  options.parameter_filler = spread_affine;
  return options;
}

// Shapes with P below one tile, C over many slices, and one large enough
// (8 x 4096 positions) that the parameter gradients are summed in several chunks.
TEST(LayerNorm, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape x : {Shape{4, 64, 16, 16}, Shape{3, 5}, Shape{2, 192, 7, 9}, Shape{8, 96, 64, 64}})
    EXPECT_TRUE(
        testing::outputs_match(check_parity(registry, "LayerNorm", {{"eps", 1e-6}}, {x}, parity_options(DType::f32))))
        << shape_str(x);
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "LayerNorm", nlohmann::json::object(), {{2, 24, 9, 11}}, parity_options(DType::f64))));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "LayerNorm", {{"elementwise_affine", false}},
                                                  {{2, 24, 9, 11}}, parity_options(DType::f32))));
}

TEST(GroupNorm, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  struct Case {
    Shape shape;
    std::int64_t groups;
  };
  for (const Case& c : {Case{{4, 64, 16, 16}, 32}, Case{{4, 12}, 3}, Case{{2, 192, 7, 9}, 1}, Case{{8, 96, 64, 64}, 8}})
    EXPECT_TRUE(testing::outputs_match(
        check_parity(registry, "GroupNorm", {{"groups", c.groups}}, {c.shape}, parity_options(DType::f32))))
        << shape_str(c.shape) << " groups " << c.groups;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "GroupNorm", {{"groups", 4}}, {{2, 24, 9, 11}}, parity_options(DType::f64))));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "GroupNorm", {{"groups", 4}, {"affine", false}},
                                                  {{2, 24, 9, 11}}, parity_options(DType::f32))));
}

// ---- inside a model spec ----

std::string norm_spec(std::int64_t groups) {
  return R"({"name": "norms", "inputs": ["image"], "nodes": [
    {"name": "stem", "type": "Conv2d", "inputs": ["image"], "outputs": ["h"],
     "params": {"out_channels": 6, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "ln", "type": "LayerNorm", "inputs": ["h"], "outputs": ["h_ln"], "params": {"eps": 1e-6}},
    {"name": "gn", "type": "GroupNorm", "inputs": ["h_ln"], "outputs": ["h_gn"], "params": {"groups": )" +
         std::to_string(groups) + R"(}},
    {"name": "head", "type": "Conv2d", "inputs": ["h_gn"], "outputs": ["x_hat"],
     "params": {"out_channels": 3, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "distortion", "type": "MSELoss", "inputs": ["x_hat", "image"], "outputs": ["mse"]}]})";
}

// Both layers in a Net built from JSON: their parameters by name, and the
// gradient of LayerNorm's gamma through the whole net against central differences.
TEST(Normalization, TrainInsideASpec) {
  Net net(ModelSpec::from_text(norm_spec(3), "norms.json"), registry, {{"image", {2, 3, 5, 5}}}, DType::f64,
          Device::cpu(), 8);
  std::mt19937_64 rng(9);
  net.input("image").copy_from(Tensor::from_values(random_values(150, rng), {2, 3, 5, 5}, DType::f64));
  std::vector<std::string> names;
  for (const NamedParameter& p : net.trainable_parameters()) names.push_back(p.name);
  for (const char* name : {"ln.gamma", "ln.beta", "gn.gamma", "gn.beta"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  Parameter& gamma = net.layer("ln").parameter("gamma");
  gamma.value.copy_from(Tensor::from_values({0.5, 1.5, -1, 2, 0.7, 1.1}, {6}, DType::f64));
  Context ctx;
  net.forward(ctx);
  net.zero_grad();
  net.backward(ctx, {{"mse", 1.0}});
  const std::vector<double> analytic = gamma.grad.to_values();
  const std::vector<double> values = gamma.value.to_values();
  for (std::size_t k = 0; k < values.size(); ++k) {
    auto loss_at = [&](double value) {
      std::vector<double> moved = values;
      moved[k] = value;
      gamma.value.copy_from(Tensor::from_values(moved, {6}, DType::f64));
      net.forward(ctx);
      return net.scalar("mse");
    };
    const double step = 1e-5;
    const double numeric = (loss_at(values[k] + step) - loss_at(values[k] - step)) / (2 * step);
    EXPECT_NEAR(analytic[k], numeric, 1e-6 * std::max({std::abs(analytic[k]), std::abs(numeric), 1.0})) << k;
  }
}

TEST(Normalization, SpecWithGroupsNotDividingChannelsNamesTheNode) {
  const std::string message = testing::shape_error_of([] {
    Net net(ModelSpec::from_text(norm_spec(4), "norms.json"), registry, {{"image", {2, 3, 5, 5}}}, DType::f64,
            Device::cpu(), 8);
  });
  EXPECT_TRUE(testing::contains(message, "node 'gn' (GroupNorm): groups 4 does not divide the 6 channels of input "
                                         "[2, 6, 5, 5]"))
      << message;
}

// ---- params and errors ----

TEST(GroupNorm, OneGroupOnFeaturesIsLayerNorm) {
  std::mt19937_64 rng(13);
  const Shape shape{5, 9};
  const std::vector<double> x = random_values(45, rng);
  const std::vector<double> gamma = random_values(9, rng), beta = random_values(9, rng);
  auto group_norm = make_layer("GroupNorm", {{"groups", 1}}, shape, gamma, beta);
  auto layer_norm = make_layer("LayerNorm", nlohmann::json::object(), shape, gamma, beta);
  expect_near_all(forward(*group_norm, x, shape), forward(*layer_norm, x, shape), 1e-13);
}

TEST(GroupNorm, RejectsGroupsThatDoNotDivideChannels) {
  auto layer = registry.create("GroupNorm", "gn", {{"groups", 3}});
  const std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 8, 4, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gn' (GroupNorm): groups 3 does not divide the 8 channels of input "
                                         "[2, 8, 4, 4]"))
      << message;
  EXPECT_EQ(layer->output_shapes({{2, 9, 4, 4}}), (std::vector<Shape>{{2, 9, 4, 4}}));
}

TEST(GroupNorm, RejectsBadParams) {
  std::string message = testing::config_error_of([] { registry.create("GroupNorm", "gn", nlohmann::json::object()); });
  EXPECT_TRUE(testing::contains(message, "parameter 'groups' is required")) << message;
  message = testing::config_error_of([] { registry.create("GroupNorm", "gn", {{"groups", 0}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gn' (GroupNorm): parameter 'groups' must be in [1, 65536], got 0"))
      << message;
  message = testing::config_error_of([] { registry.create("GroupNorm", "gn", {{"groups", 2}, {"eps", 0.0}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gn' (GroupNorm): parameter 'eps' must be a finite number > 0, got 0"))
      << message;
  message = testing::config_error_of([] {
    registry.create("GroupNorm", "gn", {{"groups", 2}, {"elementwise_affine", false}});
  });
  EXPECT_TRUE(testing::contains(message, "unknown parameter 'elementwise_affine'")) << message;
}

TEST(LayerNorm, RejectsBadParams) {
  std::string message = testing::config_error_of([] { registry.create("LayerNorm", "ln", {{"eps", -1e-6}}); });
  EXPECT_TRUE(
      testing::contains(message, "node 'ln' (LayerNorm): parameter 'eps' must be a finite number > 0, got -1e-06"))
      << message;
  message = testing::config_error_of([] { registry.create("LayerNorm", "ln", {{"eps", 0}}); });
  EXPECT_TRUE(testing::contains(message, "parameter 'eps' must be a finite number > 0, got 0")) << message;
  message = testing::config_error_of([] { registry.create("LayerNorm", "ln", {{"affine", false}}); });
  EXPECT_TRUE(testing::contains(message, "unknown parameter 'affine'")) << message;
  // The two eps values in use by Swin-style models are both accepted.
  EXPECT_NO_THROW(registry.create("LayerNorm", "ln", {{"eps", 1e-6}}));
  EXPECT_NO_THROW(registry.create("LayerNorm", "ln", {{"eps", 1e-5}}));
}

TEST(LayerNorm, RejectsBadShapes) {
  auto layer = registry.create("LayerNorm", "ln", nlohmann::json::object());
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'ln' (LayerNorm): input [4] has rank 1; expected [N, C, ...]"))
      << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 3}, {2, 3}}); });
  EXPECT_TRUE(testing::contains(message, "takes 1 input, got 2")) << message;
  layer->output_shapes({{2, 4, 3, 3}});
  layer->create_parameters({{2, 4, 3, 3}});
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 5, 3, 3}}); });
  EXPECT_TRUE(testing::contains(message, "input [2, 5, 3, 3] has 5 channels, but gamma and beta were made for 4"))
      << message;
}

TEST(Normalization, DescribeTheirParams) {
  const std::vector<ParameterInfo> layer_norm = registry.parameters("LayerNorm");
  ASSERT_EQ(layer_norm.size(), 2u);
  EXPECT_EQ(layer_norm[0].key, "eps");
  EXPECT_EQ(layer_norm[0].kind, "number");
  EXPECT_EQ(layer_norm[1].key, "elementwise_affine");
  EXPECT_EQ(layer_norm[1].default_value, "true");
  const std::vector<ParameterInfo> group_norm = registry.parameters("GroupNorm");
  ASSERT_EQ(group_norm.size(), 3u);
  EXPECT_EQ(group_norm[0].key, "groups");
  EXPECT_TRUE(group_norm[0].required);
  EXPECT_EQ(group_norm[1].key, "eps");
  EXPECT_EQ(group_norm[2].key, "affine");
  EXPECT_FALSE(group_norm[2].required);
}

}  // namespace
}  // namespace plexus

// GaussianConditional: forward against an independent f64 reference (the
// plain form Phi((v + 1/2) / s) - Phi((v - 1/2) / s) with std::erf), the far
// tail in f32, both bounds and their gradient rule, gradient checks for every
// input (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape and parameter errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// The textbook form, in f64 and with erf rather than erfc: an independent reference.
double unbounded_likelihood(double y, double s, double mean) {
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  return cdf((y - mean + 0.5) / s) - cdf((y - mean - 0.5) / s);
}

// With the default bounds.
double reference_likelihood(double y, double scale, double mean) {
  return std::max(unbounded_likelihood(y, std::max(scale, 0.11), mean), 1e-9);
}

struct LayerRun {
  std::vector<double> likelihoods, y_grad, scale_grad, mean_grad;
};

// Forward and backward once on the CPU with the given output gradient.
LayerRun run(const std::vector<double>& y, const std::vector<double>& scale, const std::vector<double>& mean,
             const std::vector<double>& output_grad, DType dtype = DType::f64, const nlohmann::json& params = {}) {
  auto layer = registry.create("GaussianConditional", "gc", params);
  const Shape shape{1, 1, 1, static_cast<std::int64_t>(y.size())};
  std::vector<Shape> shapes{shape, shape};
  if (!mean.empty()) shapes.push_back(shape);
  EXPECT_EQ(layer->output_shapes(shapes), std::vector<Shape>{shape});
  Context ctx;
  Tensor y_t = Tensor::from_values(y, shape, dtype), s_t = Tensor::from_values(scale, shape, dtype);
  Tensor m_t = mean.empty() ? Tensor() : Tensor::from_values(mean, shape, dtype);
  Tensor p(shape, dtype), dp = Tensor::from_values(output_grad, shape, dtype);
  Tensor dy(shape, dtype), ds(shape, dtype), dm(shape, dtype);
  ConstTensors in{&y_t, &s_t};
  MutableTensors din{&dy, &ds};
  if (!mean.empty()) {
    in.push_back(&m_t);
    din.push_back(&dm);
  }
  layer->forward(ctx, in, {&p});
  layer->backward(ctx, in, {&p}, {&dp}, din);
  return {p.to_values(), dy.to_values(), ds.to_values(), mean.empty() ? std::vector<double>{} : dm.to_values()};
}

TEST(GaussianConditional, ForwardMatchesTheTextbookFormula) {
  const std::vector<double> y = {0.0, 0.3, -1.0, 2.0, -3.5, 0.7}, scale = {1.0, 0.5, 2.0, 0.8, 1.5, 0.3},
                            mean = {0.0, -0.2, 0.5, 1.0, -3.0, 0.7};
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tolerance = dtype == DType::f64 ? 1e-14 : 1e-6;
    const LayerRun without_mean = run(y, scale, {}, std::vector<double>(y.size(), 1.0), dtype);
    const LayerRun with_mean = run(y, scale, mean, std::vector<double>(y.size(), 1.0), dtype);
    for (std::size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(without_mean.likelihoods[i], reference_likelihood(y[i], scale[i], 0.0), tolerance) << i;
      EXPECT_NEAR(with_mean.likelihoods[i], reference_likelihood(y[i], scale[i], mean[i]), tolerance) << i;
    }
  }
  // One value by hand: y = 0, s = 1: Phi(1/2) - Phi(-1/2) = erf(1 / (2 sqrt 2)) = 0.38292492254802624.
  EXPECT_NEAR(run({0.0}, {1.0}, {}, {1.0}).likelihoods[0], 0.38292492254802624, 1e-15);
}

TEST(GaussianConditional, FarTailKeepsItsDigitsInF32) {
  // Phi(6.5) - Phi(5.5) is 1 - 1 = 0 in f32 when computed on the upper side;
  // on the lower tail it is Phi(-5.5) - Phi(-6.5) = 1.8950e-08 - 4.016e-11.
  const double expected = 0.5 * std::erfc(5.5 / std::sqrt(2.0)) - 0.5 * std::erfc(6.5 / std::sqrt(2.0));
  const double p = run({6.0}, {1.0}, {}, {1.0}, DType::f32).likelihoods[0];
  EXPECT_NEAR(p, expected, 1e-5 * expected);
  EXPECT_GT(expected, 1e-9);  // the likelihood bound is not what we see
}

TEST(GaussianConditional, BoundsClampAndPassGradientsOnlyTowardsRaisingTheValue) {
  // Scale 0.05 < 0.11: computed at 0.11. Output gradient -1 (descent raises
  // the scale): passes; +1: zero. Compared with central differences at s = 0.11.
  const double h = 1e-6;
  auto p_at = [](double y, double s) { return unbounded_likelihood(y, s, 0.0); };
  const double dp_ds = (p_at(0.2, 0.11 + h) - p_at(0.2, 0.11 - h)) / (2 * h);
  const LayerRun down = run({0.2}, {0.05}, {}, {-1.0});
  EXPECT_NEAR(down.likelihoods[0], p_at(0.2, 0.11), 1e-14);
  // dp/ds < 0 here (y inside the bin: a wider Gaussian spreads mass away), so
  // dL/ds = -1 * dp/ds > 0 points towards lowering s: blocked.
  ASSERT_LT(dp_ds, 0.0);
  EXPECT_EQ(down.scale_grad[0], 0.0);
  const LayerRun up = run({0.2}, {0.05}, {}, {1.0});
  EXPECT_NEAR(up.scale_grad[0], dp_ds, 1e-6);  // dL/ds = dp/ds < 0: towards raising s, passes
  // The y gradient is the derivative at the bounded scale either way.
  const double dp_dy = (p_at(0.2 + h, 0.11) - p_at(0.2 - h, 0.11)) / (2 * h);
  EXPECT_NEAR(up.y_grad[0], dp_dy, 1e-6);

  // Likelihood below 1e-9 (y = 10, s = 1): output clamped to 1e-9; a
  // negative output gradient (descent raises p) passes, a positive one not.
  const LayerRun tail_down = run({10.0}, {1.0}, {}, {-1.0});
  EXPECT_EQ(tail_down.likelihoods[0], 1e-9);
  // dp/dy at y = 10, s = 1: phi(-10.5) - phi(-9.5), a tiny negative number.
  const double phi = 1.0 / std::sqrt(2.0 * M_PI);
  const double dp_dy_tail = phi * (std::exp(-0.5 * 10.5 * 10.5) - std::exp(-0.5 * 9.5 * 9.5));
  EXPECT_NEAR(tail_down.y_grad[0], -dp_dy_tail, 1e-6 * std::abs(dp_dy_tail));
  EXPECT_NE(tail_down.y_grad[0], 0.0);
  const LayerRun tail_up = run({10.0}, {1.0}, {}, {1.0});
  EXPECT_EQ(tail_up.y_grad[0], 0.0);
  EXPECT_EQ(tail_up.scale_grad[0], 0.0);
}

TEST(GaussianConditional, MeanGradientIsMinusTheValueGradient) {
  const LayerRun r = run({0.3, -0.8, 1.2}, {0.5, 1.0, 0.9}, {0.1, 0.2, -0.4}, {0.7, -1.3, 2.0});
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(r.mean_grad[i], -r.y_grad[i]);
}

// With means, the likelihood is that of y_hat - mu under the zero-mean model
// (CompressAI's GaussianConditional._likelihood(inputs, scales, means)):
// Phi((y_hat - mu + 1/2) / s) - Phi((y_hat - mu - 1/2) / s).
TEST(GaussianConditional, MeansShiftTheGaussian) {
  // y = mu: the value by hand of p(0 | s = 1), 0.38292492254802624, wherever the mean is.
  const LayerRun centred = run({1.3, -2.75}, {1.0, 1.0}, {1.3, -2.75}, {1.0, 1.0});
  for (double p : centred.likelihoods) EXPECT_NEAR(p, 0.38292492254802624, 1e-15);
  // y = 0.3, mu = -0.2, s = 0.5: v = 1/2, p = Phi(2) - Phi(0) = 0.47724986805182079
  // (Phi(2) = 0.97724986805182079); dp/dv = (phi(2) - phi(0)) / s
  // = 2 (0.053990966513188063 - 0.39894228040143268) = -0.68990262777649, so
  // dp/dmu = +0.68990262777649 and dp/dy = -0.68990262777649.
  const LayerRun shifted = run({0.3}, {0.5}, {-0.2}, {1.0});
  EXPECT_NEAR(shifted.likelihoods[0], 0.47724986805182079, 1e-14);
  EXPECT_NEAR(shifted.mean_grad[0], 0.68990262777649, 1e-13);
  EXPECT_NEAR(shifted.y_grad[0], -0.68990262777649, 1e-13);
  // Any y and mu: the same as the layer without means given y - mu, in value and gradient.
  const std::vector<double> y = {0.3, -1.7, 2.2, 0.05}, scale = {0.4, 1.1, 0.9, 2.5}, mean = {0.9, -1.0, -0.6, 0.05};
  const std::vector<double> grad = {1.0, -0.5, 2.0, 0.25};
  std::vector<double> difference(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) difference[i] = y[i] - mean[i];
  const LayerRun with_mean = run(y, scale, mean, grad), without = run(difference, scale, {}, grad);
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(with_mean.likelihoods[i], without.likelihoods[i], 1e-15) << i;
    EXPECT_NEAR(with_mean.y_grad[i], without.y_grad[i], 1e-14) << i;
    EXPECT_NEAR(with_mean.scale_grad[i], without.scale_grad[i], 1e-14) << i;
    EXPECT_NEAR(with_mean.mean_grad[i], -without.y_grad[i], 1e-14) << i;
  }
}

TEST(GaussianConditional, ParametersAreRead) {
  // scale_bound 0.5: a scale of 0.2 counts as 0.5.
  const double p = run({0.0}, {0.2}, {}, {1.0}, DType::f64, {{"scale_bound", 0.5}}).likelihoods[0];
  EXPECT_NEAR(p, std::erf(1.0 / std::sqrt(2.0)), 1e-14);  // Phi(1) - Phi(-1)
  // likelihood_bound 0.5 lifts p(0 | s = 1) = 0.383 to 0.5.
  EXPECT_EQ(run({0.0}, {1.0}, {}, {1.0}, DType::f64, {{"likelihood_bound", 0.5}}).likelihoods[0], 0.5);
}

// Scales in [0.3, 2] and means in [-0.5, 0.5]: no bound is active (p > 1e-4),
// so the exact derivative is what backward must give.
void unbounded_inputs(int input, std::vector<double>& values, std::mt19937_64& rng) {
  if (input == 1) {
    std::uniform_real_distribution<double> scale(0.3, 2.0);
    for (double& v : values) v = scale(rng);
  } else if (input == 2) {
    std::uniform_real_distribution<double> mean(-0.5, 0.5);
    for (double& v : values) v = mean(rng);
  }
}

GradCheckOptions gradient_options() {
  GradCheckOptions options;
  options.input_filler = unbounded_inputs;
  return options;
}

TEST(GaussianConditional, GradientsCpu) {
  const Shape shape{2, 3, 4, 5};
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "GaussianConditional", {}, {shape, shape}, Device::cpu(), gradient_options())));
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "GaussianConditional", {}, {shape, shape, shape}, Device::cpu(), gradient_options())));
}

TEST(GaussianConditional, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Shape shape{2, 3, 4, 5};
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "GaussianConditional", {}, {shape, shape}, Device::cuda(), gradient_options())));
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "GaussianConditional", {}, {shape, shape, shape}, Device::cuda(), gradient_options())));
}

TEST(GaussianConditional, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // Default inputs in [-1, 1]: scales below the bound and some tails included,
  // so the bound branches are compared too.
  const Shape shape{4, 192, 8, 8};
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "GaussianConditional", {}, {shape, shape})));
  ParityOptions options;
  options.input_filler = unbounded_inputs;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "GaussianConditional", {}, {shape, shape, shape}, options)));
}

void expect_shape_error(const std::vector<Shape>& shapes, const std::string& expected) {
  auto layer = registry.create("GaussianConditional", "gc", {});
  try {
    layer->output_shapes(shapes);
    FAIL() << "expected a ShapeError containing: " << expected;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(GaussianConditional, RejectsBadShapes) {
  expect_shape_error({{1, 2, 3, 3}},
                     "node 'gc' (GaussianConditional): takes 2 or 3 inputs (y_hat, scales[, means]), got 1");
  expect_shape_error({{1, 2, 3, 3}, {1, 2, 3, 3}, {1, 2, 3, 3}, {1, 2, 3, 3}}, "takes 2 or 3 inputs");
  expect_shape_error({{1, 2, 3, 3}, {1, 2, 3, 4}},
                     "input 1 (scales) [1, 2, 3, 4] must have the shape of y_hat [1, 2, 3, 3]");
  expect_shape_error({{1, 2, 3, 3}, {1, 2, 3, 3}, {2, 2, 3, 3}},
                     "input 2 (means) [2, 2, 3, 3] must have the shape of y_hat [1, 2, 3, 3]");
  expect_shape_error({{2, 3, 3}, {2, 3, 3}}, "input 0 (y_hat) must be [N, C, H, W], got [2, 3, 3]");
}

TEST(GaussianConditional, RejectsBadBounds) {
  for (const auto& [params, expected] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"scale_bound", 0.0}}, "scale_bound"},
           {{{"scale_bound", -1.0}}, "must be a finite number > 0, got -1"},
           {{{"likelihood_bound", 1.0}}, "must be in [0, 1), got 1"},
           {{{"likelihood_bound", -0.1}}, "likelihood_bound"}}) {
    try {
      registry.create("GaussianConditional", "gc", params);
      FAIL() << "expected a ConfigError for " << params.dump();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("node 'gc' (GaussianConditional)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace plexus

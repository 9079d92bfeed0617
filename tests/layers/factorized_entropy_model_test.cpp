// FactorizedEntropyModel: forward against a naive scalar re-implementation of
// the density chain and against the fact that a cumulative runs from 0 to 1,
// the initialisation of tensorflow-compression / CompressAI, tail stability,
// the LowerBound gradient, gradient checks (CPU; CUDA in f64 on a GPU),
// CPU/CUDA parity, and parameter/shape errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();
const char* const kType = "FactorizedEntropyModel";
constexpr std::array<int, 5> kWidths = {1, 3, 3, 3, 1};

std::unique_ptr<Layer> make_layer(const nlohmann::json& params, const Shape& shape, DType dtype,
                                  std::uint64_t seed = 5) {
  auto layer = registry.create(kType, "entropy", params);
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(dtype, Device::cpu(), rng);
  return layer;
}

// Moves every parameter off its initial value: matrices and biases by
// U(-1, 1), factors too, so that a = tanh(factor) != 0 and the chain bends.
void perturb(const std::string&, std::vector<double>& values, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> offset(-1.0, 1.0);
  for (double& v : values) v += offset(rng);
}

void perturb_layer(Layer& layer, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Parameter* p : layer.parameters()) {
    std::vector<double> values = p->value.to_values();
    perturb(p->name, values, rng);
    p->value = Tensor::from_values(values, p->shape, p->value.dtype());
  }
}

std::vector<double> forward(Layer& layer, const std::vector<double>& y, const Shape& shape, DType dtype) {
  Context ctx;
  Tensor input = Tensor::from_values(y, shape, dtype), output(shape, dtype);
  layer.forward(ctx, {&input}, {&output});
  return output.to_values();
}

// ---- A naive scalar re-implementation of one channel's density ----------

struct ChannelValues {  // raw parameter values of one channel
  std::array<std::vector<double>, 4> matrix, bias;
  std::array<std::vector<double>, 3> factor;
};

ChannelValues channel_values(Layer& layer, int c) {
  ChannelValues values;
  auto slice = [&](const std::string& name, int size) {
    std::vector<double> all = layer.parameter(name).value.to_values();
    return std::vector<double>(all.begin() + c * size, all.begin() + (c + 1) * size);
  };
  for (int k = 0; k < 4; ++k) {
    values.matrix[k] = slice("matrix" + std::to_string(k), kWidths[k + 1] * kWidths[k]);
    values.bias[k] = slice("bias" + std::to_string(k), kWidths[k + 1]);
    if (k < 3) values.factor[k] = slice("factor" + std::to_string(k), kWidths[k + 1]);
  }
  return values;
}

// The chain before its final sigmoid, straight from the paper's definition.
double naive_logit(const ChannelValues& values, double x) {
  std::vector<double> v = {x};
  for (int k = 0; k < 4; ++k) {
    const int in = kWidths[k], out = kWidths[k + 1];
    std::vector<double> z(out);
    for (int i = 0; i < out; ++i) {
      z[i] = values.bias[k][i];
      for (int j = 0; j < in; ++j) z[i] += std::log(1.0 + std::exp(values.matrix[k][i * in + j])) * v[j];
    }
    if (k == 3) return z[0];
    v.assign(out, 0.0);
    for (int i = 0; i < out; ++i) v[i] = z[i] + std::tanh(values.factor[k][i]) * std::tanh(z[i]);
  }
  return 0.0;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// c(y + 1/2) - c(y - 1/2), plainly subtracted (accurate where both are far from 1).
double naive_likelihood(const ChannelValues& values, double y) {
  return sigmoid(naive_logit(values, y + 0.5)) - sigmoid(naive_logit(values, y - 0.5));
}

// ---- Forward values -------------------------------------------------------

TEST(FactorizedEntropyModel, ForwardMatchesNaiveDensityChain) {
  const Shape shape{2, 3, 5};  // rank 3: channel axis 1, inner 5
  auto layer = make_layer({}, shape, DType::f64);
  perturb_layer(*layer, 21);
  std::vector<double> y(30);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> value(-3.0, 3.0);
  for (double& v : y) v = value(rng);
  y[0] = 0.0;
  y[7] = 2.0;
  const std::vector<double> p = forward(*layer, y, shape, DType::f64);
  for (int c = 0; c < 3; ++c) {
    const ChannelValues values = channel_values(*layer, c);
    for (int n = 0; n < 2; ++n)
      for (int s = 0; s < 5; ++s) {
        const int i = (n * 3 + c) * 5 + s;
        const double expected = std::max(naive_likelihood(values, y[i]), 1e-9);
        EXPECT_NEAR(p[i], expected, 1e-12 * expected) << "channel " << c << " y " << y[i];
      }
  }
}

TEST(FactorizedEntropyModel, LikelihoodsOfAllIntegersSumToOneAtInitialisation) {
  // sum over integers y of c(y + 1/2) - c(y - 1/2) telescopes to
  // c(R + 1/2) - c(-R - 1/2), which is 1 when c runs from 0 to 1. The initial
  // chain is the ramp y / init_scale plus an offset, so R = 400 leaves tails
  // of about e^-40. No lower bound, so nothing is added to the tails.
  const int radius = 400, points = 2 * radius + 1, channels = 4;
  const Shape shape{1, channels, points};
  auto layer = make_layer({{"likelihood_bound", 0.0}}, shape, DType::f64);
  std::vector<double> y(static_cast<std::size_t>(channels * points));
  for (int c = 0; c < channels; ++c)
    for (int j = 0; j < points; ++j) y[c * points + j] = j - radius;
  const std::vector<double> p = forward(*layer, y, shape, DType::f64);
  for (int c = 0; c < channels; ++c) {
    double total = 0.0;
    for (int j = 0; j < points; ++j) {
      ASSERT_GT(p[c * points + j], 0.0);
      total += p[c * points + j];
    }
    EXPECT_NEAR(total, 1.0, 1e-12) << "channel " << c;
  }
}

TEST(FactorizedEntropyModel, InitialisesLikeTensorflowCompression) {
  const Shape shape{1, 5, 2, 2};
  auto layer = make_layer({}, shape, DType::f64);
  std::vector<std::string> names;
  for (Parameter* p : layer->parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"matrix0", "bias0", "factor0", "matrix1", "bias1", "factor1", "matrix2",
                                             "bias2", "factor2", "matrix3", "bias3"}));
  const double scale = std::pow(10.0, 1.0 / 4.0);  // init_scale^(1/K)
  for (int k = 0; k < 4; ++k) {
    const std::int64_t in = kWidths[k], out = kWidths[k + 1];
    Parameter& matrix = layer->parameter("matrix" + std::to_string(k));
    EXPECT_EQ(matrix.shape, (Shape{5, out, in}));
    // softplus(matrix) = 1 / (scale * out)
    for (double v : matrix.value.to_values()) EXPECT_NEAR(std::log1p(std::exp(v)), 1.0 / (scale * out), 1e-14);
    Parameter& bias = layer->parameter("bias" + std::to_string(k));
    EXPECT_EQ(bias.shape, (Shape{5, out, 1}));
    std::vector<double> biases = bias.value.to_values();
    for (double v : biases) {
      EXPECT_GE(v, -0.5);
      EXPECT_LE(v, 0.5);
    }
    EXPECT_NE(biases.front(), biases.back());  // drawn, not constant
    if (k < 3) {
      Parameter& factor = layer->parameter("factor" + std::to_string(k));
      EXPECT_EQ(factor.shape, (Shape{5, out, 1}));
      EXPECT_EQ(factor.value.to_values(), std::vector<double>(static_cast<std::size_t>(5 * out), 0.0));
    }
  }
  // So the initial chain is linear with slope 27 / (scale * 3)^3 / scale = 1 / init_scale.
  const ChannelValues values = channel_values(*layer, 2);
  EXPECT_NEAR(naive_logit(values, 1.0) - naive_logit(values, 0.0), 0.1, 1e-14);
}

TEST(FactorizedEntropyModel, InitScaleSetsTheInitialSlope) {
  auto layer = make_layer({{"init_scale", 4.0}}, {1, 1}, DType::f64);
  const ChannelValues values = channel_values(*layer, 0);
  EXPECT_NEAR(naive_logit(values, 3.0) - naive_logit(values, 1.0), 2.0 / 4.0, 1e-14);
}

TEST(FactorizedEntropyModel, TailLikelihoodsKeepTheirDigitsInF32) {
  // Far in the upper tail c(y +- 1/2) are both within 1e-6 of 1, where f32
  // has steps of 6e-8: subtracting them directly would lose most digits.
  // Computed on the tail side, f32 must agree with f64 to 1e-4.
  const Shape shape{6, 1};
  const nlohmann::json params = {{"likelihood_bound", 1e-30}};
  auto single = make_layer(params, shape, DType::f32);
  auto reference = make_layer(params, shape, DType::f64);
  for (Parameter* p : reference->parameters())  // the same (f32-representable) values
    p->value = Tensor::from_values(single->parameter(p->name).value.to_values(), p->shape, DType::f64);
  const std::vector<double> y = {60, 100, 150, -60, -100, -150};
  const std::vector<double> p32 = forward(*single, y, shape, DType::f32);
  const std::vector<double> p64 = forward(*reference, y, shape, DType::f64);
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_GT(p64[i], 1e-9) << "y " << y[i];
    EXPECT_LT(p64[i], 1e-2) << "y " << y[i];
    EXPECT_NEAR(p32[i], p64[i], 1e-4 * p64[i]) << "y " << y[i];
  }
}

// ---- The lower bound and its gradient ---------------------------------------

TEST(FactorizedEntropyModel, LowerBoundPassesGradientOnlyTowardsHigherLikelihood) {
  // y = +-300 at initialisation: p ~ 0.1 e^-30 < 1e-9, so the output is the bound.
  const Shape shape{2, 1};
  auto layer = make_layer({}, shape, DType::f64);
  Context ctx;
  Tensor y = Tensor::from_values({300.0, -300.0}, shape, DType::f64), p(shape, DType::f64);
  layer->forward(ctx, {&y}, {&p});
  EXPECT_EQ(p.to_values(), (std::vector<double>{1e-9, 1e-9}));

  auto backward = [&](double output_grad) {
    for (Parameter* q : layer->parameters()) q->grad.fill_zero();
    Tensor dp = Tensor::from_values({output_grad, output_grad}, shape, DType::f64), dy(shape, DType::f64);
    layer->backward(ctx, {&y}, {&p}, {&dp}, {&dy});
    double parameter_grad_norm = 0.0;
    for (Parameter* q : layer->parameters())
      for (double g : q->grad.to_values()) parameter_grad_norm += std::abs(g);
    return std::make_pair(dy.to_values(), parameter_grad_norm);
  };

  // dL/dp > 0: descent would lower p further below the bound: no gradient.
  auto [dy_away, norm_away] = backward(1.0);
  EXPECT_EQ(dy_away, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(norm_away, 0.0);

  // dL/dp = -1: descent raises p, so the gradient passes: dL/dy = -dp/dy,
  // with dp/dy = (sigmoid'(u) - sigmoid'(l)) / init_scale on the initial ramp.
  auto [dy_towards, norm_towards] = backward(-1.0);
  EXPECT_GT(norm_towards, 0.0);
  const ChannelValues values = channel_values(*layer, 0);
  auto sigmoid_slope = [](double x) {
    double e = std::exp(-std::abs(x));
    return e / ((1.0 + e) * (1.0 + e));
  };
  const std::vector<double> at = {300.0, -300.0};
  for (int i = 0; i < 2; ++i) {
    const double dp_dy =
        0.1 * (sigmoid_slope(naive_logit(values, at[i] + 0.5)) - sigmoid_slope(naive_logit(values, at[i] - 0.5)));
    EXPECT_NEAR(dy_towards[i], -dp_dy, 1e-6 * std::abs(dp_dy)) << "y " << at[i];
  }
  EXPECT_GT(dy_towards[0], 0.0);  // upper tail: raising p means lowering y
  EXPECT_LT(dy_towards[1], 0.0);
}

// ---- Gradient checks and parity --------------------------------------------

GradCheckOptions entropy_options(bool perturbed) {
  GradCheckOptions options;
  options.input_low = -3.0;
  options.input_high = 3.0;
  if (perturbed) options.parameter_filler = perturb;
  return options;
}

TEST(FactorizedEntropyModel, GradientsCpu) {
  for (Shape shape : {Shape{2, 3, 4, 4}, Shape{3, 2}, Shape{1, 2, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, kType, {}, {shape}, Device::cpu(), entropy_options(false))));
  for (Shape shape : {Shape{2, 3, 4, 4}, Shape{4, 1, 3}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, kType, {}, {shape}, Device::cpu(), entropy_options(true))));
}

TEST(FactorizedEntropyModel, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{2, 3, 4, 4}, Shape{3, 2}})
    for (bool perturbed : {false, true})
      EXPECT_TRUE(testing::gradients_match(
          check_gradients(registry, kType, {}, {shape}, Device::cuda(), entropy_options(perturbed))));
}

ParityOptions entropy_parity_options() {
  ParityOptions options;
  options.input_low = -3.0;
  options.input_high = 3.0;
  options.parameter_filler = perturb;
  // Parameter gradients are f32 sums over thousands of elements per channel,
  // added in different orders on the two devices.
  options.tolerance = 1e-3;
  return options;
}

TEST(FactorizedEntropyModel, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // One block per channel; many blocks per channel (atomics across blocks);
  // rank 2 (inner = 1).
  for (Shape shape : {Shape{2, 4, 8, 8}, Shape{2, 3, 48, 48}, Shape{64, 5}})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, kType, {}, {shape}, entropy_parity_options())));
}

TEST(FactorizedEntropyModel, ParityCpuCudaWithActiveLowerBound) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // Inputs over [-40, 40] at initialisation give p from about 0.002 to 0.025,
  // so a bound of 0.01 is active for about half of them, with output
  // gradients of both signs.
  ParityOptions options;
  options.input_low = -40.0;
  options.input_high = 40.0;
  options.tolerance = 1e-3;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, kType, {{"likelihood_bound", 0.01}}, {{4, 4, 16, 16}}, options)));
}

// ---- Errors -----------------------------------------------------------------

void expect_config_error(const nlohmann::json& params, const std::string& expected) {
  try {
    registry.create(kType, "entropy", params);
    FAIL() << "expected a ConfigError containing: " << expected;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(FactorizedEntropyModel, RejectsBadParams) {
  expect_config_error({{"filters", {3, 3}}},
                      "node 'entropy' (FactorizedEntropyModel): parameter 'filters' must be [3, 3, 3] (the "
                      "only widths implemented, Ballé et al. 2018), got [3, 3]");
  expect_config_error({{"init_scale", 0}}, "parameter 'init_scale' must be a finite number > 0, got 0");
  expect_config_error({{"likelihood_bound", 1.5}}, "parameter 'likelihood_bound' must be in [0, 1), got 1.5");
  expect_config_error({{"likelihood_bound", -1e-9}}, "parameter 'likelihood_bound' must be in [0, 1), got -1e-09");
  EXPECT_THROW(registry.create(kType, "entropy", {{"tail_mass", 1e-9}}), ConfigError);
}

void expect_shape_error(Layer& layer, const std::vector<Shape>& shapes, const std::string& expected) {
  try {
    layer.output_shapes(shapes);
    FAIL() << "expected a ShapeError containing: " << expected;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(FactorizedEntropyModel, RejectsBadShapes) {
  auto layer = registry.create(kType, "entropy", {});
  expect_shape_error(*layer, {{5}},
                     "node 'entropy' (FactorizedEntropyModel): input must be [N, C, ...] (rank >= 2), got [5]");
  expect_shape_error(*layer, {{2, 3}, {2, 3}}, "takes 1 input, got 2");
  layer->create_parameters({{2, 3, 8, 8}});
  expect_shape_error(*layer, {{2, 4, 8, 8}}, "input [2, 4, 8, 8] has 4 channels, but the parameters were made for 3");
  EXPECT_EQ(layer->output_shapes({{7, 3, 2, 2}}), std::vector<Shape>{(Shape{7, 3, 2, 2})});
}

}  // namespace
}  // namespace plexus

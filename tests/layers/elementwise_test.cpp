// The element-wise layers (layers/elementwise/): for each type its forward
// and backward at points with known values, f64 gradient checks (CPU; CUDA
// on a GPU), CPU/CUDA parity, and its shape and parameter errors; Mul's
// inputs also broadcast. Also the
// fused activation of the CUDA kernels (fused_activation.cuh) against the
// ReLU and LeakyReLU ops it writes out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "fused_activation.cuh"
#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// y of one CPU forward in f64.
std::vector<double> forward_f64(const std::string& type, const nlohmann::json& params,
                                const std::vector<double>& values) {
  auto layer = registry.create(type, "e", params);
  Context ctx;
  Shape shape{static_cast<std::int64_t>(values.size())};
  Tensor x = Tensor::from_values(values, shape, DType::f64), y(shape, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

// dL/dx of one CPU forward and backward in f64, for dL/dy = dy_value everywhere.
std::vector<double> input_grad_f64(const std::string& type, const nlohmann::json& params,
                                   const std::vector<double>& values, double dy_value) {
  auto layer = registry.create(type, "e", params);
  Context ctx;
  Shape shape{static_cast<std::int64_t>(values.size())};
  Tensor x = Tensor::from_values(values, shape, DType::f64), y(shape, DType::f64), dx(shape, DType::f64);
  Tensor dy = Tensor::from_values(std::vector<double>(values.size(), dy_value), shape, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  return dx.to_values();
}

// ---- Every type: gradient checks, parity, the number of inputs ----

// A layer type with params, and the range of its checks' inputs: the
// steepest part of Sigmoid, Tanh and GELU; both sides of a kink at 0.
struct Case {
  std::string type;
  nlohmann::json params;
  int inputs;
  double range;  // inputs ~ U(-range, range)
  bool kink_at_zero;
};

std::vector<Case> cases() {
  const nlohmann::json none = nlohmann::json::object();
  return {{"ReLU", none, 1, 1.0, true},
          {"LeakyReLU", {{"negative_slope", 0.01}}, 1, 1.0, true},
          {"LeakyReLU", {{"negative_slope", 0.2}}, 1, 1.0, true},
          {"LeakyReLU", {{"negative_slope", -0.5}}, 1, 1.0, true},
          {"Abs", none, 1, 1.0, true},
          {"Sigmoid", none, 1, 4.0, false},
          {"Tanh", {{"scale", 1.0}}, 1, 3.0, false},
          {"Tanh", {{"scale", 0.5}}, 1, 3.0, false},
          {"Tanh", {{"scale", -2.0}}, 1, 3.0, false},
          {"GELU", {{"approximate", "none"}}, 1, 3.0, false},
          {"GELU", {{"approximate", "tanh"}}, 1, 3.0, false},
          {"Mul", none, 2, 1.0, false}};
}

std::string name_of(const Case& c) { return c.type + " " + c.params.dump(); }

std::vector<Shape> inputs_of(const Case& c, const Shape& shape) { return std::vector<Shape>(c.inputs, shape); }

GradCheckOptions gradient_options(const Case& c) {
  GradCheckOptions options;
  options.input_low = -c.range;
  options.input_high = c.range;
  if (c.kink_at_zero) {
    options.kink = 0.0;
    options.kink_range = 2e-5;  // > step: never difference across the kink
  }
  return options;
}

TEST(Elementwise, GradientsCpu) {
  for (const Case& c : cases())
    for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
      EXPECT_TRUE(testing::gradients_match(
          check_gradients(registry, c.type, c.params, inputs_of(c, shape), Device::cpu(), gradient_options(c))))
          << name_of(c);
}

TEST(Elementwise, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : cases())
    EXPECT_TRUE(testing::gradients_match(
        check_gradients(registry, c.type, c.params, inputs_of(c, {2, 3, 4, 5}), Device::cuda(), gradient_options(c))))
        << name_of(c);
}

// f32 and f64, over twice the gradient checks' range (Sigmoid, Tanh and GELU into saturation).
TEST(Elementwise, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : cases()) {
    ParityOptions options;
    options.input_low = -2 * c.range;
    options.input_high = 2 * c.range;
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, c.type, c.params, inputs_of(c, {4, 8, 16, 16}), options)))
        << name_of(c);
    options.dtype = DType::f64;
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, c.type, c.params, inputs_of(c, {3, 5, 7}), options)))
        << name_of(c);
  }
}

TEST(Elementwise, OneInputTypesRejectTwoInputs) {
  for (const Case& c : cases()) {
    if (c.inputs != 1) continue;
    auto layer = registry.create(c.type, "e", c.params);
    const std::string message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}}); });
    EXPECT_TRUE(testing::contains(message, "node 'e' (" + c.type + "): takes 1 input, got 2")) << message;
  }
}

// ---- ReLU ----

TEST(ReLU, ForwardMatchesDefinition) {
  auto layer = registry.create("ReLU", "r", {});
  Context ctx;
  Tensor x = Tensor::from_values({-2.0, -0.5, 0.0, 0.25, 3.0}, {5});
  Tensor y({5});
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{0.0, 0.0, 0.0, 0.25, 3.0}));
}

TEST(ReLU, BackwardByHand) {
  EXPECT_EQ(input_grad_f64("ReLU", {}, {-2.0, 0.0, 0.5, 3.0}, 2.0), (std::vector<double>{0.0, 0.0, 2.0, 2.0}));
}

// ---- LeakyReLU ----

TEST(LeakyReLU, ForwardWithTheDefaultSlope) {
  std::vector<double> y = forward_f64("LeakyReLU", nlohmann::json::object(), {-2.0, 0.0, 3.0});
  EXPECT_DOUBLE_EQ(y[0], -0.02);  // PyTorch's default slope, 0.01
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 3.0);
}

TEST(LeakyReLU, ForwardWithAGivenSlope) {
  std::vector<double> y = forward_f64("LeakyReLU", {{"negative_slope", 0.25}}, {-2.0, -0.5, 0.5});
  EXPECT_EQ(y, (std::vector<double>{-0.5, -0.125, 0.5}));
}

TEST(LeakyReLU, BackwardByHand) {
  EXPECT_EQ(input_grad_f64("LeakyReLU", {{"negative_slope", 0.25}}, {-2.0, 0.0, 0.5}, 2.0),
            (std::vector<double>{0.5, 0.5, 2.0}));
}

TEST(LeakyReLU, RejectsASlopeThatIsNotANumber) {
  std::string message = testing::config_error_of([] {
    registry.create("LeakyReLU", "leaky", {{"negative_slope", "small"}});
  });
  EXPECT_TRUE(testing::contains(message, "node 'leaky' (LeakyReLU)")) << message;
  EXPECT_TRUE(testing::contains(message, "negative_slope")) << message;
}

// ---- Abs ----

TEST(Abs, ForwardAndBackwardMatchDefinition) {
  auto layer = registry.create("Abs", "a", {});
  Context ctx;
  Tensor x = Tensor::from_values({-2.0, -0.5, 0.0, 0.25, 3.0}, {5});
  Tensor y({5}), dx({5});
  Tensor dy = Tensor::from_values({1.0, 2.0, 3.0, 4.0, 5.0}, {5});
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{2.0, 0.5, 0.0, 0.25, 3.0}));
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  EXPECT_EQ(dx.to_values(), (std::vector<double>{-1.0, -2.0, 0.0, 4.0, 5.0}));
}

// ---- Sigmoid ----

TEST(Sigmoid, ForwardAtKnownPoints) {
  // sigmoid(0) = 1/2; sigmoid(ln 3) = 1 / (1 + 1/3) = 3/4; sigmoid(-ln 3) = 1/4.
  const std::vector<double> y = forward_f64("Sigmoid", {}, {0.0, std::log(3.0), -std::log(3.0)});
  const std::vector<double> expected{0.5, 0.75, 0.25};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(y[k], expected[k], 1e-15) << k;
}

TEST(Sigmoid, SaturatesWithoutNaN) {
  auto layer = registry.create("Sigmoid", "s", {});
  Context ctx;
  Tensor x = Tensor::from_values({-1000.0, 1000.0}, {2});
  Tensor y({2});
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{0.0, 1.0}));
}

TEST(Sigmoid, BackwardByHand) {
  // dy/dx at ln 3 = 3/4 * 1/4 = 3/16.
  EXPECT_NEAR(input_grad_f64("Sigmoid", {}, {std::log(3.0)}, 2.0)[0], 2.0 * 3.0 / 16.0, 1e-15);
}

// ---- Tanh ----

TEST(Tanh, ForwardAtKnownPoints) {
  // tanh(0) = 0; tanh(ln 3) = (9 - 1) / (9 + 1) = 4/5; tanh is odd.
  for (double scale : {1.0, 0.5}) {
    const std::vector<double> y = forward_f64("Tanh", {{"scale", scale}}, {0.0, std::log(3.0), -std::log(3.0)});
    const std::vector<double> expected{0.0, 0.8 * scale, -0.8 * scale};
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(y[k], expected[k], 1e-15) << "scale " << scale << ", " << k;
  }
}

TEST(Tanh, SaturatesWithoutNaN) {
  auto layer = registry.create("Tanh", "t", {{"scale", 0.5}});
  Context ctx;
  Tensor x = Tensor::from_values({-1000.0, 1000.0}, {2});
  Tensor y({2});
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{-0.5, 0.5}));
}

TEST(Tanh, BackwardByHand) {
  // d/dx 0.5 tanh(x) at ln 3 = 0.5 (1 - 16/25) = 9/50.
  EXPECT_NEAR(input_grad_f64("Tanh", {{"scale", 0.5}}, {std::log(3.0)}, 2.0)[0], 2.0 * 9.0 / 50.0, 1e-15);
}

TEST(Tanh, AZeroScaleIsRefused) {
  std::string message = testing::config_error_of([] { registry.create("Tanh", "t", {{"scale", 0.0}}); });
  EXPECT_TRUE(testing::contains(message, "scale")) << message;
  EXPECT_TRUE(testing::contains(message, "non-zero")) << message;
}

// ---- GELU ----

// The standard normal distribution: Phi(1) = 0.841344746..., Phi(2) = 0.977249868...
// (tables, e.g. Abramowitz & Stegun 26.2), and its density phi(1) = exp(-1/2) / sqrt(2 pi).
constexpr double kPhiOf1 = 0.8413447460685429;
constexpr double kPhiOf2 = 0.9772498680518208;
constexpr double kDensityAt1 = 0.24197072451914337;

TEST(GELU, ForwardAtKnownPoints) {
  // GELU(x) = x Phi(x); Phi(-x) = 1 - Phi(x).
  const std::vector<double> y = forward_f64("GELU", {}, {0.0, 1.0, -1.0, 2.0});
  const std::vector<double> expected{0.0, kPhiOf1, -(1.0 - kPhiOf1), 2.0 * kPhiOf2};
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(y[k], expected[k], 1e-15) << k;
}

TEST(GELU, BackwardAtKnownPoints) {
  // dGELU/dx = Phi(x) + x phi(x): 1/2 at 0, Phi(1) + phi(1) at 1, Phi(-1) - phi(1) at -1.
  const std::vector<double> dx = input_grad_f64("GELU", {{"approximate", "none"}}, {0.0, 1.0, -1.0}, 2.0);
  const std::vector<double> expected{0.5, kPhiOf1 + kDensityAt1, (1.0 - kPhiOf1) - kDensityAt1};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(dx[k], 2.0 * expected[k], 1e-15) << k;
}

// PyTorch's tanh form: x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2.
double gelu_tanh_form(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

TEST(GELU, TanhApproximationMatchesItsFormulaAndTheExactForm) {
  std::vector<double> xs;
  for (int k = -60; k <= 60; ++k) xs.push_back(0.1 * k);
  const std::vector<double> approximate = forward_f64("GELU", {{"approximate", "tanh"}}, xs);
  const std::vector<double> exact = forward_f64("GELU", {}, xs);
  for (std::size_t k = 0; k < xs.size(); ++k) {
    EXPECT_NEAR(approximate[k], gelu_tanh_form(xs[k]), 1e-15) << xs[k];
    EXPECT_NEAR(approximate[k], exact[k], 5e-4) << xs[k];  // the tanh form is within 4.8e-4 of x Phi(x)
  }
  EXPECT_NE(approximate[70], exact[70]);  // x = 1: two formulas, not one
}

TEST(GELU, TanhApproximationBackwardByCentralDifferences) {
  // At a few points, by hand: (f(x + h) - f(x - h)) / 2h of the formula above.
  const std::vector<double> xs{-2.5, -1.0, 0.0, 0.3, 1.7};
  const std::vector<double> dx = input_grad_f64("GELU", {{"approximate", "tanh"}}, xs, 1.0);
  const double h = 1e-5;
  for (std::size_t k = 0; k < xs.size(); ++k)
    EXPECT_NEAR(dx[k], (gelu_tanh_form(xs[k] + h) - gelu_tanh_form(xs[k] - h)) / (2 * h), 1e-9) << xs[k];
}

TEST(GELU, SaturatesWithoutNaN) {
  for (const char* approximate : {"none", "tanh"}) {
    const std::vector<double> y = forward_f64("GELU", {{"approximate", approximate}}, {-1000.0, 1000.0});
    EXPECT_EQ(y, (std::vector<double>{-0.0, 1000.0})) << approximate;
    const std::vector<double> dx = input_grad_f64("GELU", {{"approximate", approximate}}, {-1000.0, 1000.0}, 1.0);
    EXPECT_EQ(dx, (std::vector<double>{0.0, 1.0})) << approximate;
  }
}

TEST(GELU, RejectsAnUnknownApproximation) {
  std::string message = testing::config_error_of([] { registry.create("GELU", "g", {{"approximate", "erf"}}); });
  EXPECT_TRUE(testing::contains(message, "node 'g' (GELU)")) << message;
  EXPECT_TRUE(testing::contains(message, "approximate")) << message;
  EXPECT_TRUE(testing::contains(message, "\"erf\"")) << message;
}

// ---- Mul ----

TEST(Mul, ForwardMultipliesElementWise) {
  auto layer = registry.create("Mul", "gate", {});
  Context ctx;
  Tensor a = Tensor::from_values({2.0, -3.0, 0.5, 0.0}, {2, 2});
  Tensor b = Tensor::from_values({4.0, 5.0, -0.5, 7.0}, {2, 2});
  Tensor y({2, 2});
  layer->forward(ctx, {&a, &b}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{8.0, -15.0, -0.25, 0.0}));
}

TEST(Mul, BackwardByHand) {
  auto layer = registry.create("Mul", "gate", {});
  Context ctx;
  Tensor a = Tensor::from_values({2.0, -3.0}, {2});
  Tensor b = Tensor::from_values({4.0, 5.0}, {2});
  Tensor y({2}), dy = Tensor::from_values({1.0, -2.0}, {2}), da({2}), db({2});
  layer->forward(ctx, {&a, &b}, {&y});
  layer->backward(ctx, {&a, &b}, {&y}, {&dy}, {&da, &db});
  EXPECT_EQ(da.to_values(), (std::vector<double>{4.0, -10.0}));  // dy * b
  EXPECT_EQ(db.to_values(), (std::vector<double>{2.0, 6.0}));    // dy * a
}

TEST(Mul, RejectsShapesThatDiffer) {
  auto layer = registry.create("Mul", "gate", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 3, 8, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gate' (Mul): input 1 is [2, 3, 8, 4] but input 0 is [2, 3, 8, 8]"))
      << message;
}

TEST(Mul, RejectsThreeInputs) {
  auto layer = registry.create("Mul", "gate", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gate' (Mul): takes 2 inputs, got 3")) << message;
}

// ---- Mul, broadcast ----

// The gating and scaling patterns on [N, C, H, W] (as in Add's tests): a
// channel gate, a spatial gate, a per-channel scale, each on either side,
// both inputs broadcast at once, a lone size 1 inside, and one scale for
// the whole tensor.
std::vector<std::vector<Shape>> broadcast_patterns() {
  return {{{2, 3, 4, 5}, {1, 1, 1, 1}}, {{2, 3, 4, 5}, {2, 3, 1, 1}},
          {{2, 3, 4, 5}, {2, 1, 4, 5}}, {{1, 3, 1, 1}, {2, 3, 4, 5}},
          {{2, 1, 4, 5}, {2, 3, 4, 5}}, {{2, 1, 4, 5}, {1, 3, 1, 1}},
          {{2, 3, 4, 5}, {2, 3, 1, 5}}, {{3, 1}, {1, 4}}};
}

// y[n, c, h, w] = x[n, c, h, w] * s[0, c, 0, 0]; dL/dx = dL/dy * s, dL/ds[c] = sum_{n,h,w} dL/dy * x.
TEST(Mul, BroadcastForwardAndBackwardByHand) {
  auto layer = registry.create("Mul", "gate", {});
  EXPECT_EQ(layer->output_shapes({{2, 2, 1, 2}, {1, 2, 1, 1}}), (std::vector<Shape>{{2, 2, 1, 2}}));
  Context ctx;
  Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 1, 2}, DType::f64);
  Tensor s = Tensor::from_values({10, -1}, {1, 2, 1, 1}, DType::f64);
  Tensor y({2, 2, 1, 2}, DType::f64), dx({2, 2, 1, 2}, DType::f64), ds({1, 2, 1, 1}, DType::f64);
  layer->forward(ctx, {&x, &s}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{10, 20, -3, -4, 50, 60, -7, -8}));
  Tensor dy = Tensor::from_values({1, 0, 0, 1, 2, 0, 0, -1}, {2, 2, 1, 2}, DType::f64);
  layer->backward(ctx, {&x, &s}, {&y}, {&dy}, {&dx, &ds});
  EXPECT_EQ(dx.to_values(), (std::vector<double>{10, 0, 0, -1, 20, 0, 0, 1}));
  EXPECT_EQ(ds.to_values(), (std::vector<double>{1 * 1 + 2 * 5, 1 * 4 - 1 * 8}));
  // The gate first: the same values, the gradients swapped.
  Tensor ds0({1, 2, 1, 1}, DType::f64), dx1({2, 2, 1, 2}, DType::f64);
  layer->forward(ctx, {&s, &x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{10, 20, -3, -4, 50, 60, -7, -8}));
  layer->backward(ctx, {&s, &x}, {&y}, {&dy}, {&ds0, &dx1});
  EXPECT_EQ(ds0.to_values(), ds.to_values());
  EXPECT_EQ(dx1.to_values(), dx.to_values());
}

TEST(Mul, BroadcastGradientsCpu) {
  for (const auto& shapes : broadcast_patterns())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Mul", {}, shapes)))
        << shape_str(shapes[0]) << " " << shape_str(shapes[1]);
}

TEST(Mul, BroadcastGradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const auto& shapes : broadcast_patterns())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Mul", {}, shapes, Device::cuda())))
        << shape_str(shapes[0]) << " " << shape_str(shapes[1]);
}

// Large enough that the CUDA sums take both layouts: a block per element of
// the gradient (a channel gate, summed over H*W) and a thread per element (a
// spatial gate, summed over C).
TEST(Mul, BroadcastParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const std::vector<std::vector<Shape>> shapes{{{4, 16, 16, 16}, {4, 16, 1, 1}},
                                               {{4, 16, 16, 16}, {4, 1, 16, 16}},
                                               {{1, 16, 1, 1}, {4, 16, 16, 16}},
                                               {{4, 1, 16, 16}, {1, 16, 1, 1}}};
  for (const auto& inputs : shapes) {
    ParityOptions options;
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Mul", {}, inputs, options))) << shape_str(inputs[1]);
    options.dtype = DType::f64;
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Mul", {}, inputs, options))) << shape_str(inputs[1]);
  }
}

TEST(Mul, RejectsShapesThatDoNotBroadcast) {
  auto layer = registry.create("Mul", "gate", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 2, 1, 1}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gate' (Mul): input 1 is [2, 2, 1, 1] but input 0 is [2, 3, 8, 8]"))
      << message;
  EXPECT_TRUE(testing::contains(message, "Mul needs inputs of one shape, or of one rank")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {3, 1, 1}}); });
  EXPECT_TRUE(testing::contains(message, "input 1 is [3, 1, 1] but input 0 is [2, 3, 8, 8]")) << message;
}

// ---- The fused activation of the CUDA kernels ----

// activated() (fused_activation.cuh) writes the ReLU and LeakyReLU formulas
// out; it must give what the ops' kernels give (one element at a time, as
// on CUDA), bit for bit: -0, infinities and NaN included.
TEST(FusedActivation, AgreesWithTheReLUAndLeakyReLUOps) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> values{-3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.25f, -inf, inf, nan};
  auto same_bits = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  for (float v : values) {
    const float relu = layers::elementwise::ReLU{}.forward(v);
    EXPECT_TRUE(same_bits(layers::activated(v, true, 0.0f), relu)) << v;
    for (float slope : {0.01f, 0.2f, 1.0f}) {
      const float leaky = layers::elementwise::LeakyReLU{slope}.forward(v);
      EXPECT_TRUE(same_bits(layers::activated(v, true, slope), leaky)) << v << " slope " << slope;
    }
    EXPECT_TRUE(same_bits(layers::activated(v, false, 0.2f), v)) << v;
  }
  for (double v : {-2.0, -0.0, 0.5, -std::numeric_limits<double>::infinity()})
    EXPECT_EQ(layers::activated(v, true, 0.25), layers::elementwise::LeakyReLU{0.25}.forward(v)) << v;
}

}  // namespace
}  // namespace plexus

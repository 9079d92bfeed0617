// Tanh: forward at points with known values (with and without a scale),
// saturation without NaN, gradient checks (CPU; CUDA in f64 on a GPU),
// CPU/CUDA parity, a zero scale refused, shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

TEST(Tanh, ForwardAtKnownPoints) {
  Context ctx;
  // tanh(0) = 0; tanh(ln 3) = (9 - 1) / (9 + 1) = 4/5; tanh is odd.
  Tensor x = Tensor::from_values({0.0, std::log(3.0), -std::log(3.0)}, {3}, DType::f64);
  for (double scale : {1.0, 0.5}) {
    auto layer = registry.create("Tanh", "t", {{"scale", scale}});
    Tensor y({3}, DType::f64);
    layer->forward(ctx, {&x}, {&y});
    const std::vector<double> expected{0.0, 0.8 * scale, -0.8 * scale};
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(y.to_values()[k], expected[k], 1e-15) << "scale " << scale << ", " << k;
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
  auto layer = registry.create("Tanh", "t", {{"scale", 0.5}});
  Context ctx;
  // d/dx 0.5 tanh(x) at ln 3 = 0.5 (1 - 16/25) = 9/50.
  Tensor x = Tensor::from_values({std::log(3.0)}, {1}, DType::f64);
  Tensor y({1}, DType::f64), dy = Tensor::from_values({2.0}, {1}, DType::f64), dx({1}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  EXPECT_NEAR(dx.to_values()[0], 2.0 * 9.0 / 50.0, 1e-15);
}

TEST(Tanh, GradientsCpu) {
  GradCheckOptions wide;
  wide.input_low = -3.0;
  wide.input_high = 3.0;
  for (double scale : {1.0, 0.5, -2.0})
    for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, "Tanh", {{"scale", scale}}, {shape}, Device::cpu(), wide)))
          << "scale " << scale;
}

TEST(Tanh, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (double scale : {1.0, 0.5})
    EXPECT_TRUE(testing::gradients_match(
        check_gradients(registry, "Tanh", {{"scale", scale}}, {{2, 3, 4, 5}}, Device::cuda())));
}

TEST(Tanh, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions wide;
  wide.input_low = -6.0;
  wide.input_high = 6.0;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Tanh", {{"scale", 0.5}}, {{4, 8, 16, 16}}, wide)));
  wide.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Tanh", {}, {{3, 5, 7}}, wide)));
}

TEST(Tanh, AZeroScaleIsRefused) {
  try {
    registry.create("Tanh", "t", {{"scale", 0.0}});
    ADD_FAILURE() << "a zero scale was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(testing::contains(e.what(), "scale")) << e.what();
    EXPECT_TRUE(testing::contains(e.what(), "non-zero")) << e.what();
  }
}

TEST(Tanh, RejectsTwoInputs) {
  auto layer = registry.create("Tanh", "t", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "node 't' (Tanh): takes 1 input, got 2")) << message;
}

}  // namespace
}  // namespace plexus

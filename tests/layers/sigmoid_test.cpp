// Sigmoid: forward at points with known values, saturation without NaN,
// gradient checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

TEST(Sigmoid, ForwardAtKnownPoints) {
  auto layer = registry.create("Sigmoid", "s", {});
  Context ctx;
  // sigmoid(0) = 1/2; sigmoid(ln 3) = 1 / (1 + 1/3) = 3/4; sigmoid(-ln 3) = 1/4.
  Tensor x = Tensor::from_values({0.0, std::log(3.0), -std::log(3.0)}, {3}, DType::f64);
  Tensor y({3}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  std::vector<double> expected{0.5, 0.75, 0.25};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(y.to_values()[k], expected[k], 1e-15) << k;
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
  auto layer = registry.create("Sigmoid", "s", {});
  Context ctx;
  // dy/dx at ln 3 = 3/4 * 1/4 = 3/16.
  Tensor x = Tensor::from_values({std::log(3.0)}, {1}, DType::f64);
  Tensor y({1}, DType::f64), dy = Tensor::from_values({2.0}, {1}, DType::f64), dx({1}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  EXPECT_NEAR(dx.to_values()[0], 2.0 * 3.0 / 16.0, 1e-15);
}

TEST(Sigmoid, GradientsCpu) {
  GradCheckOptions wide;
  wide.input_low = -4.0;
  wide.input_high = 4.0;
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Sigmoid", {}, {shape}, Device::cpu(), wide)));
}

TEST(Sigmoid, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Sigmoid", {}, {{2, 3, 4, 5}}, Device::cuda())));
}

TEST(Sigmoid, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions wide;
  wide.input_low = -8.0;
  wide.input_high = 8.0;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Sigmoid", {}, {{4, 8, 16, 16}}, wide)));
  wide.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Sigmoid", {}, {{3, 5, 7}}, wide)));
}

TEST(Sigmoid, RejectsTwoInputs) {
  auto layer = registry.create("Sigmoid", "s", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "node 's' (Sigmoid): takes 1 input, got 2")) << message;
}

}  // namespace
}  // namespace plexus

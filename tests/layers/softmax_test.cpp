// Softmax: forward at points with known values along the channels and along
// the last axis, no overflow at large inputs, backward by hand, gradient
// checks along every axis (CPU; CUDA in f64 on a GPU), CPU/CUDA parity for
// both kernel layouts, bad axes and inputs refused.
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

void expect_values_near(const Tensor& tensor, const std::vector<double>& expected, double tolerance) {
  const std::vector<double> values = tensor.to_values();
  ASSERT_EQ(values.size(), expected.size());
  for (std::size_t k = 0; k < values.size(); ++k) EXPECT_NEAR(values[k], expected[k], tolerance) << "element " << k;
}

TEST(Softmax, ForwardAlongChannelsByDefault) {
  auto layer = registry.create("Softmax", "attn", {});
  Context ctx;
  // [1, 2, 1, 2]: pixel 0 has channels (0, ln 3): e^0 / (e^0 + 3) = 1/4 and 3/4;
  // pixel 1 has (0, 0): 1/2 and 1/2.
  Tensor x = Tensor::from_values({0.0, 0.0, std::log(3.0), 0.0}, {1, 2, 1, 2}, DType::f64);
  Tensor y({1, 2, 1, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  expect_values_near(y, {0.25, 0.5, 0.75, 0.5}, 1e-15);
}

TEST(Softmax, ForwardAlongTheLastAxis) {
  for (int axis : {-1, 1}) {
    auto layer = registry.create("Softmax", "attn", {{"axis", axis}});
    Context ctx;
    // [2, 3]: row 0 (0, ln 2, 0) -> (1/4, 1/2, 1/4); row 1 (ln 3, 0, 0) -> (3/5, 1/5, 1/5).
    Tensor x = Tensor::from_values({0.0, std::log(2.0), 0.0, std::log(3.0), 0.0, 0.0}, {2, 3}, DType::f64);
    Tensor y({2, 3}, DType::f64);
    layer->forward(ctx, {&x}, {&y});
    expect_values_near(y, {0.25, 0.5, 0.25, 0.6, 0.2, 0.2}, 1e-15);
  }
}

TEST(Softmax, ForwardAlongTheBatchAxis) {
  auto layer = registry.create("Softmax", "attn", {{"axis", 0}});
  Context ctx;
  // [2, 2]: columns (0, ln 3) -> (1/4, 3/4) and (ln 4, 0) -> (4/5, 1/5).
  Tensor x = Tensor::from_values({0.0, std::log(4.0), std::log(3.0), 0.0}, {2, 2}, DType::f64);
  Tensor y({2, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  expect_values_near(y, {0.25, 0.8, 0.75, 0.2}, 1e-15);
}

TEST(Softmax, LargeInputsDoNotOverflow) {
  auto layer = registry.create("Softmax", "attn", {{"axis", -1}});
  Context ctx;
  // exp(1000) overflows f32 and f64; the maximum subtracted first, the ratios are those of (0, ln 3) and (0, 0).
  Tensor x = Tensor::from_values({1000.0, 1000.0 + std::log(3.0)}, {1, 2}, DType::f64);
  Tensor y({1, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  expect_values_near(y, {0.25, 0.75}, 1e-12);
  Tensor x32 = Tensor::from_values({1000.0, 1000.0}, {1, 2});
  Tensor y32({1, 2});
  layer->forward(ctx, {&x32}, {&y32});
  EXPECT_EQ(y32.to_values(), (std::vector<double>{0.5, 0.5}));
}

TEST(Softmax, BackwardByHand) {
  auto layer = registry.create("Softmax", "attn", {{"axis", -1}});
  Context ctx;
  // y = (1/4, 3/4), dy = (1, 0): sum dy * y = 1/4, dx = y * (dy - 1/4) = (3/16, -3/16).
  Tensor x = Tensor::from_values({0.0, std::log(3.0)}, {1, 2}, DType::f64);
  Tensor y({1, 2}, DType::f64), dy = Tensor::from_values({1.0, 0.0}, {1, 2}, DType::f64), dx({1, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  expect_values_near(dx, {0.1875, -0.1875}, 1e-15);
}

TEST(Softmax, GradientsCpuAlongEveryAxis) {
  for (int axis : {0, 1, 2, 3, -1, -2, -3, -4})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Softmax", {{"axis", axis}}, {{2, 3, 4, 5}})))
        << "axis " << axis;
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Softmax", {{"axis", 0}}, {{7}})));
  // A line longer than a warp (the CUDA row kernel's lanes loop), inputs wide enough to matter.
  GradCheckOptions wide;
  wide.input_low = -4.0;
  wide.input_high = 4.0;
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Softmax", {{"axis", -1}}, {{2, 70}}, Device::cpu(), wide)));
}

TEST(Softmax, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (int axis : {0, 1, 2, 3, -1})
    EXPECT_TRUE(testing::gradients_match(
        check_gradients(registry, "Softmax", {{"axis", axis}}, {{2, 3, 4, 5}}, Device::cuda())))
        << "axis " << axis;
  GradCheckOptions wide;
  wide.input_low = -4.0;
  wide.input_high = 4.0;
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Softmax", {{"axis", -1}}, {{2, 70}}, Device::cuda(), wide)));
}

TEST(Softmax, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions wide;
  wide.input_low = -8.0;
  wide.input_high = 8.0;
  // Channels of NCHW (strided lines), attention rows of a window (contiguous lines), a line longer than a warp.
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Softmax", {}, {{4, 16, 12, 12}}, wide)));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Softmax", {{"axis", -1}}, {{8, 4, 64, 64}}, wide)));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Softmax", {{"axis", 3}}, {{2, 3, 5, 1000}}, wide)));
  ParityOptions f64 = wide;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Softmax", {{"axis", 2}}, {{3, 5, 7, 9}}, f64)));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Softmax", {{"axis", -1}}, {{3, 5, 7, 49}}, f64)));
}

TEST(Softmax, RejectsAnAxisOutsideTheInput) {
  for (int axis : {4, -5}) {
    auto layer = registry.create("Softmax", "attn", {{"axis", axis}});
    std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 4, 5}}); });
    EXPECT_TRUE(testing::contains(message, "node 'attn' (Softmax): axis " + std::to_string(axis) +
                                               " is outside input [2, 3, 4, 5] (rank 4: axes -4 to 3)"))
        << message;
  }
  // The default axis 1 does not exist in a rank-1 input.
  auto layer = registry.create("Softmax", "attn", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{5}}); });
  EXPECT_TRUE(testing::contains(message, "axis 1 is outside input [5] (rank 1: axes -1 to 0)")) << message;
}

TEST(Softmax, RejectsAnAbsurdAxisInTheSpec) {
  std::string message = testing::config_error_of([&] { registry.create("Softmax", "attn", {{"axis", 1000}}); });
  EXPECT_TRUE(testing::contains(message, "attn")) << message;
  EXPECT_TRUE(testing::contains(message, "axis")) << message;
}

TEST(Softmax, RejectsTwoInputsAndAScalar) {
  auto layer = registry.create("Softmax", "attn", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3}, {2, 3}}); });
  EXPECT_TRUE(testing::contains(message, "node 'attn' (Softmax): takes 1 input, got 2")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{}}); });
  EXPECT_TRUE(testing::contains(message, "input is a scalar []")) << message;
}

}  // namespace
}  // namespace plexus

// LeakyReLU: forward by hand (default and given slope), gradient checks
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape and parameter errors.
#include <gtest/gtest.h>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

GradCheckOptions kink_at_zero() {
  GradCheckOptions options;
  options.kink = 0.0;
  options.kink_range = 2e-5;  // > step: never difference across the kink
  return options;
}

std::vector<double> forward(const nlohmann::json& params, const std::vector<double>& values) {
  auto layer = registry.create("LeakyReLU", "leaky", params);
  Context ctx;
  Shape shape{static_cast<std::int64_t>(values.size())};
  Tensor x = Tensor::from_values(values, shape, DType::f64), y(shape, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

TEST(LeakyReLU, ForwardWithTheDefaultSlope) {
  std::vector<double> y = forward(nlohmann::json::object(), {-2.0, 0.0, 3.0});
  EXPECT_DOUBLE_EQ(y[0], -0.02);  // PyTorch's default slope, 0.01
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 3.0);
}

TEST(LeakyReLU, ForwardWithAGivenSlope) {
  std::vector<double> y = forward({{"negative_slope", 0.25}}, {-2.0, -0.5, 0.5});
  EXPECT_EQ(y, (std::vector<double>{-0.5, -0.125, 0.5}));
}

TEST(LeakyReLU, GradientsCpu) {
  for (double slope : {0.01, 0.2, -0.5})
    for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
      EXPECT_TRUE(testing::gradients_match(
          check_gradients(registry, "LeakyReLU", {{"negative_slope", slope}}, {shape}, Device::cpu(), kink_at_zero())));
}

TEST(LeakyReLU, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "LeakyReLU", {{"negative_slope", 0.2}}, {{2, 3, 4, 5}},
                                                       Device::cuda(), kink_at_zero())));
}

TEST(LeakyReLU, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "LeakyReLU", {}, {{4, 8, 16, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "LeakyReLU", {{"negative_slope", 0.3}}, {{3, 5, 7}}, f64)));
}

TEST(LeakyReLU, RejectsTwoInputs) {
  auto layer = registry.create("LeakyReLU", "leaky", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "node 'leaky' (LeakyReLU): takes 1 input, got 2")) << message;
}

TEST(LeakyReLU, RejectsASlopeThatIsNotANumber) {
  std::string message = testing::config_error_of([] {
    registry.create("LeakyReLU", "leaky", {{"negative_slope", "small"}});
  });
  EXPECT_TRUE(testing::contains(message, "node 'leaky' (LeakyReLU)")) << message;
  EXPECT_TRUE(testing::contains(message, "negative_slope")) << message;
}

}  // namespace
}  // namespace plexus

// ReLU: gradient checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shapes.
#include <gtest/gtest.h>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

GradCheckOptions relu_options() {
  GradCheckOptions options;
  options.kink = 0.0;
  options.kink_range = 2e-5;  // > step: never difference across the kink
  return options;
}

TEST(ReLU, ForwardMatchesDefinition) {
  auto layer = registry.create("ReLU", "r", {});
  Context ctx;
  Tensor x = Tensor::from_values({-2.0, -0.5, 0.0, 0.25, 3.0}, {5});
  Tensor y({5});
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{0.0, 0.0, 0.0, 0.25, 3.0}));
}

TEST(ReLU, GradientsCpu) {
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}}) {
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "ReLU", {}, {shape}, Device::cpu(), relu_options())));
  }
}

TEST(ReLU, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "ReLU", {}, {{2, 3, 4, 5}}, Device::cuda(), relu_options())));
}

TEST(ReLU, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "ReLU", {}, {{4, 8, 16, 16}})));
}

TEST(ReLU, RejectsTwoInputs) {
  auto layer = registry.create("ReLU", "r", {});
  try {
    layer->output_shapes({{2}, {2}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'r' (ReLU): takes 1 input, got 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plexus

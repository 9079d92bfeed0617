// Abs: forward by definition, the gradient sign(x) by hand, gradient checks
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shapes.
#include <gtest/gtest.h>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

GradCheckOptions abs_options() {
  GradCheckOptions options;
  options.kink = 0.0;
  options.kink_range = 2e-5;  // > step: never difference across the kink
  return options;
}

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

TEST(Abs, GradientsCpu) {
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Abs", {}, {shape}, Device::cpu(), abs_options())));
}

TEST(Abs, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Abs", {}, {{2, 3, 4, 5}}, Device::cuda(), abs_options())));
}

TEST(Abs, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Abs", {}, {{4, 8, 16, 16}})));
}

TEST(Abs, RejectsTwoInputs) {
  auto layer = registry.create("Abs", "a", {});
  try {
    layer->output_shapes({{2}, {2}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'a' (Abs): takes 1 input, got 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plexus

// Mul: forward by hand, gradient checks for both inputs (CPU; CUDA in f64 on
// a GPU), CPU/CUDA parity, shape errors.
#include <gtest/gtest.h>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

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

TEST(Mul, GradientsCpu) {
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Mul", {}, {shape, shape})));
}

TEST(Mul, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Mul", {}, {{2, 3, 4, 5}, {2, 3, 4, 5}}, Device::cuda())));
}

TEST(Mul, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Mul", {}, {{4, 8, 16, 16}, {4, 8, 16, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Mul", {}, {{3, 5, 7}, {3, 5, 7}}, f64)));
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

}  // namespace
}  // namespace plexus

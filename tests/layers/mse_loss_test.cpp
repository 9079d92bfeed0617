// MSELoss: forward against hand-computed values, gradient checks (CPU; CUDA
// in f64 on a GPU), CPU/CUDA parity, shape errors.
#include <gtest/gtest.h>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

double mse_of(const std::vector<double>& a, const std::vector<double>& b, Shape shape, DType dtype) {
  auto layer = registry.create("MSELoss", "mse", {});
  EXPECT_EQ(layer->output_shapes({shape, shape}), std::vector<Shape>{Shape{}});
  Context ctx;
  Tensor ta = Tensor::from_values(a, shape, dtype), tb = Tensor::from_values(b, shape, dtype);
  Tensor loss(Shape{}, dtype);
  layer->forward(ctx, {&ta, &tb}, {&loss});
  return loss.to_values().at(0);
}

TEST(MSELoss, ForwardMatchesHandComputedValue) {
  // differences 1, 0, -2, 3 -> squares 1, 0, 4, 9 -> mean 14 / 4
  for (DType dtype : {DType::f64, DType::f32})
    EXPECT_NEAR(mse_of({1, 2, 3, 4}, {0, 2, 5, 1}, {2, 2}, dtype), 3.5, 1e-6) << dtype_name(dtype);
  // one element: (0.5 - (-1))^2
  EXPECT_DOUBLE_EQ(mse_of({0.5}, {-1.0}, {1}, DType::f64), 2.25);
}

TEST(MSELoss, BackwardMatchesHandComputedValue) {
  auto layer = registry.create("MSELoss", "mse", {});
  Context ctx;
  Tensor a = Tensor::from_values({1, 2, 3, 4}, {4}, DType::f64);
  Tensor b = Tensor::from_values({0, 2, 5, 1}, {4}, DType::f64);
  Tensor loss(Shape{}, DType::f64), dloss = Tensor::from_values({3.0}, Shape{}, DType::f64);
  Tensor da({4}, DType::f64), db({4}, DType::f64);
  layer->forward(ctx, {&a, &b}, {&loss});
  layer->backward(ctx, {&a, &b}, {&loss}, {&dloss}, {&da, &db});
  // dL/da = 3 * 2 (a - b) / 4
  EXPECT_EQ(da.to_values(), (std::vector<double>{1.5, 0.0, -3.0, 4.5}));
  EXPECT_EQ(db.to_values(), (std::vector<double>{-1.5, 0.0, 3.0, -4.5}));
}

TEST(MSELoss, GradientsCpu) {
  for (Shape shape : {Shape{1}, Shape{7}, Shape{2, 3, 4}, Shape{3, 2, 4, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape}, Device::cpu())));
}

TEST(MSELoss, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape}, Device::cuda())));
}

TEST(MSELoss, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // The second shape needs many blocks, so the atomicAdd of block sums is exercised.
  for (Shape shape : {Shape{4, 8, 16, 16}, Shape{8, 3, 128, 128}})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MSELoss", {}, {shape, shape})));
}

TEST(MSELoss, RejectsMismatchedShapesNamingBoth) {
  auto layer = registry.create("MSELoss", "distortion", {});
  try {
    layer->output_shapes({{2, 3, 8, 8}, {2, 3, 8, 9}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'distortion' (MSELoss): input a [2, 3, 8, 8] and input b "
                                         "[2, 3, 8, 9] must have the same shape"),
              std::string::npos)
        << e.what();
  }
}

TEST(MSELoss, RejectsWrongInputCount) {
  auto layer = registry.create("MSELoss", "distortion", {});
  try {
    layer->output_shapes({{2, 3}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("takes 2 inputs (a, b), got 1"), std::string::npos) << e.what();
  }
}

TEST(MSELoss, RejectsUnknownParams) {
  EXPECT_THROW(registry.create("MSELoss", "distortion", {{"reduction", "sum"}}), ConfigError);
}

}  // namespace
}  // namespace plexus

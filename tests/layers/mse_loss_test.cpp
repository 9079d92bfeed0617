// MSELoss: forward against hand-computed values, gradient checks (CPU; CUDA
// in f64 on a GPU), CPU/CUDA parity, shape errors; the same with per-sample
// weights (a third input).
#include <gtest/gtest.h>

#include <random>

#include "layers/layer_test_support.h"
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
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape}, Device::cpu())));
}

TEST(MSELoss, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape}, Device::cuda())));
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

double weighted_mse_of(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& w,
                       Shape shape, DType dtype) {
  auto layer = registry.create("MSELoss", "mse", {});
  const Shape weights_shape{shape[0]};
  EXPECT_EQ(layer->output_shapes({shape, shape, weights_shape}), std::vector<Shape>{Shape{}});
  Context ctx;
  Tensor ta = Tensor::from_values(a, shape, dtype), tb = Tensor::from_values(b, shape, dtype);
  Tensor tw = Tensor::from_values(w, weights_shape, dtype);
  Tensor loss(Shape{}, dtype);
  layer->forward(ctx, {&ta, &tb, &tw}, {&loss});
  return loss.to_values().at(0);
}

TEST(MSELoss, WeightedForwardMatchesHandComputedValue) {
  // sample 0 differences 1, 0 -> 1; sample 1 differences -2, 3 -> 13; (2 * 1 + 0.5 * 13) / 4
  for (DType dtype : {DType::f64, DType::f32})
    EXPECT_NEAR(weighted_mse_of({1, 2, 3, 4}, {0, 2, 5, 1}, {2.0, 0.5}, {2, 2}, dtype), 2.125, 1e-6)
        << dtype_name(dtype);
  // weights of one: the unweighted mean, 14 / 4
  EXPECT_NEAR(weighted_mse_of({1, 2, 3, 4}, {0, 2, 5, 1}, {1.0, 1.0}, {2, 2}, DType::f64), 3.5, 1e-12);
  // three samples of a rank-3 input: squares 4, 1 | 0, 9 | 1, 1; weights 1, 2, 3 -> (5 + 18 + 6) / 6
  EXPECT_NEAR(weighted_mse_of({2, 1, 0, 3, 1, -1}, {0, 0, 0, 0, 0, 0}, {1, 2, 3}, {3, 1, 2}, DType::f64), 29.0 / 6,
              1e-12);
}

TEST(MSELoss, WeightedBackwardMatchesHandComputedValue) {
  auto layer = registry.create("MSELoss", "mse", {});
  Context ctx;
  Tensor a = Tensor::from_values({1, 2, 3, 4}, {2, 2}, DType::f64);
  Tensor b = Tensor::from_values({0, 2, 5, 1}, {2, 2}, DType::f64);
  Tensor w = Tensor::from_values({2.0, 0.5}, {2}, DType::f64);
  Tensor loss(Shape{}, DType::f64), dloss = Tensor::from_values({3.0}, Shape{}, DType::f64);
  Tensor da({2, 2}, DType::f64), db({2, 2}, DType::f64), dw({2}, DType::f64);
  layer->forward(ctx, {&a, &b, &w}, {&loss});
  layer->backward(ctx, {&a, &b, &w}, {&loss}, {&dloss}, {&da, &db, &dw});
  // dL/da = 3 * 2 w (a - b) / 4: sample 0 (w 2) 3 * (1, 0), sample 1 (w 0.5) 0.75 * (-2, 3)
  EXPECT_EQ(da.to_values(), (std::vector<double>{3.0, 0.0, -1.5, 2.25}));
  EXPECT_EQ(db.to_values(), (std::vector<double>{-3.0, 0.0, 1.5, -2.25}));
  // dL/dw = 3 * (squared error of the sample) / 4: 3 * 1 / 4, 3 * 13 / 4
  EXPECT_EQ(dw.to_values(), (std::vector<double>{0.75, 9.75}));
}

TEST(MSELoss, WeightedGradientsCpu) {
  for (Shape shape : {Shape{1}, Shape{4, 7}, Shape{2, 3, 4}, Shape{3, 2, 4, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape, {shape[0]}}, Device::cpu())));
}

TEST(MSELoss, WeightedGradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{4, 7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "MSELoss", {}, {shape, shape, {shape[0]}}, Device::cuda())));
}

TEST(MSELoss, WeightedParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // Large samples (several blocks per sample), and more samples than the
  // reduction has blocks (one block per sample).
  for (Shape shape : {Shape{4, 8, 16, 16}, Shape{8, 3, 128, 128}, Shape{3000, 5}})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MSELoss", {}, {shape, shape, {shape[0]}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MSELoss", {}, {{3, 5, 7}, {3, 5, 7}, {3}}, f64)));
}

TEST(MSELoss, WeightedIsDeterministicOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Shape shape{8, 3, 128, 128};
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> value(-1, 1);
  std::vector<double> a(static_cast<std::size_t>(shape_numel(shape))), b(a.size()), w(8);
  for (auto* values : {&a, &b, &w})
    for (double& v : *values) v = value(rng);
  auto layer = registry.create("MSELoss", "mse", {});
  Context ctx(Device::cuda());
  Tensor ta = Tensor::from_values(a, shape, DType::f32, Device::cuda());
  Tensor tb = Tensor::from_values(b, shape, DType::f32, Device::cuda());
  Tensor tw = Tensor::from_values(w, {8}, DType::f32, Device::cuda());
  Tensor loss(Shape{}, DType::f32, Device::cuda());
  layer->forward(ctx, {&ta, &tb, &tw}, {&loss});
  const double first = loss.to_values().at(0);
  for (int repeat = 0; repeat < 5; ++repeat) {
    layer->forward(ctx, {&ta, &tb, &tw}, {&loss});
    EXPECT_EQ(loss.to_values().at(0), first);
  }
}

TEST(MSELoss, RejectsWeightsThatAreNotOnePerSample) {
  auto layer = registry.create("MSELoss", "distortion", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 3, 8, 8}, {3}}); });
  EXPECT_TRUE(testing::contains(message, "node 'distortion' (MSELoss): input weights is [3] but must be [2], one "
                                         "weight per sample of a [2, 3, 8, 8]"))
      << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 3}, {2, 3}, {2, 1}}); });
  EXPECT_TRUE(testing::contains(message, "input weights is [2, 1] but must be [2]")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{}, {}, {1}}); });
  EXPECT_TRUE(testing::contains(message, "input a [] has no batch dimension for per-sample weights")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}, {2}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "takes 2 inputs (a, b), got 4 (or 3: a, b and per-sample weights [N])"))
      << message;
}

TEST(MSELoss, RejectsUnknownParams) {
  EXPECT_THROW(registry.create("MSELoss", "distortion", {{"reduction", "sum"}}), ConfigError);
}

}  // namespace
}  // namespace plexus

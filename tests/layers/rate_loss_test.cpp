// RateLoss: forward against hand-computed bits per pixel, gradient checks
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// Likelihoods in (0.05, 1): what an entropy model with a lower bound produces.
// Every input (the image's values do not matter, only its shape).
void positive_likelihoods(int, std::vector<double>& values, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> likelihood(0.05, 1.0);
  for (double& v : values) v = likelihood(rng);
}

double rate_of(const std::vector<double>& likelihoods, Shape likelihood_shape, Shape image_shape, DType dtype) {
  auto layer = registry.create("RateLoss", "rate", {});
  EXPECT_EQ(layer->output_shapes({likelihood_shape, image_shape}), std::vector<Shape>{Shape{}});
  Context ctx;
  Tensor p = Tensor::from_values(likelihoods, likelihood_shape, dtype);
  Tensor image(image_shape, dtype);
  Tensor rate(Shape{}, dtype);
  layer->forward(ctx, {&p, &image}, {&rate});
  return rate.to_values().at(0);
}

TEST(RateLoss, ForwardMatchesHandComputedBitsPerPixel) {
  for (DType dtype : {DType::f64, DType::f32}) {
    // -log2: 1 + 2 + 0 + 3 = 6 bits over 1 * 4 * 4 pixels
    EXPECT_NEAR(rate_of({0.5, 0.25, 1.0, 0.125}, {1, 1, 2, 2}, {1, 3, 4, 4}, dtype), 6.0 / 16.0, 1e-6);
    // batch 2: 1 + 1 + 2 + 0 = 4 bits over 2 * 2 * 4 pixels
    EXPECT_NEAR(rate_of({0.5, 0.5, 0.25, 1.0}, {2, 2, 1, 1}, {2, 3, 2, 4}, dtype), 4.0 / 16.0, 1e-6);
  }
}

TEST(RateLoss, GradientIsMinusOneOverPLn2PerPixel) {
  auto layer = registry.create("RateLoss", "rate", {});
  Context ctx;
  Tensor p = Tensor::from_values({0.5, 0.25}, {1, 2, 1, 1}, DType::f64);
  Tensor image({1, 3, 2, 2}, DType::f64);
  Tensor rate(Shape{}, DType::f64), drate = Tensor::from_values({2.0}, Shape{}, DType::f64);
  Tensor dp({1, 2, 1, 1}, DType::f64);
  Tensor dimage = Tensor::from_values(std::vector<double>(12, 7.0), {1, 3, 2, 2}, DType::f64);
  layer->forward(ctx, {&p, &image}, {&rate});
  layer->backward(ctx, {&p, &image}, {&rate}, {&drate}, {&dp, &dimage});
  const double ln2 = std::log(2.0);
  std::vector<double> expected = {-2.0 / (0.5 * ln2 * 4), -2.0 / (0.25 * ln2 * 4)};
  std::vector<double> actual = dp.to_values();
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12);
  // A gradient asked for the image anyway is overwritten with zeros.
  EXPECT_EQ(dimage.to_values(), std::vector<double>(12, 0.0));
  EXPECT_FALSE(layer->traits(Device::cpu()).input_is_differentiable(1));
  EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(0));
}

GradCheckOptions rate_options() {
  GradCheckOptions options;
  options.input_filler = positive_likelihoods;
  return options;
}

TEST(RateLoss, GradientsCpu) {
  const std::vector<std::vector<Shape>> cases = {
      {{1, 2, 2, 2}, {1, 3, 8, 8}}, {{2, 3, 4, 4}, {2, 3, 16, 16}}, {{3, 5}, {3, 1, 4, 4}}};
  for (const auto& shapes : cases)
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "RateLoss", {}, shapes, Device::cpu(), rate_options())));
}

TEST(RateLoss, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "RateLoss", {}, {{2, 3, 4, 4}, {2, 3, 16, 16}}, Device::cuda(), rate_options())));
}

TEST(RateLoss, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions options;
  options.input_filler = positive_likelihoods;
  for (const auto& shapes :
       std::vector<std::vector<Shape>>{{{4, 8, 16, 16}, {4, 3, 64, 64}}, {{8, 192, 16, 16}, {8, 3, 256, 256}}})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "RateLoss", {}, shapes, options)));
}

void expect_shape_error(const std::vector<Shape>& shapes, const std::string& expected) {
  auto layer = registry.create("RateLoss", "rate", {});
  try {
    layer->output_shapes(shapes);
    FAIL() << "expected a ShapeError containing: " << expected;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(RateLoss, RejectsBatchMismatch) {
  expect_shape_error({{2, 4, 4, 4}, {3, 3, 16, 16}},
                     "node 'rate' (RateLoss): likelihoods [2, 4, 4, 4] and image [3, 3, 16, 16] must "
                     "have the same batch size (axis 0)");
}

TEST(RateLoss, RejectsImageOfWrongRank) {
  expect_shape_error({{2, 4, 4, 4}, {2, 16, 16}},
                     "input 1 (image) must be [N, C, H, W], got [2, 16, 16] (likelihoods [2, 4, 4, 4])");
}

TEST(RateLoss, RejectsWrongInputCount) {
  expect_shape_error({{2, 4, 4, 4}}, "takes 2 or more inputs (likelihoods..., image), got 1");
}

TEST(RateLoss, RejectsBatchMismatchOfASecondLikelihood) {
  expect_shape_error({{2, 4, 4, 4}, {3, 4, 1, 1}, {2, 3, 16, 16}},
                     "input 1: likelihoods [3, 4, 1, 1] and image [2, 3, 16, 16] must have the same batch size");
}

TEST(RateLoss, SumsTheBitsOfSeveralLikelihoodInputs) {
  for (DType dtype : {DType::f64, DType::f32}) {
    auto layer = registry.create("RateLoss", "rate", {});
    const std::vector<Shape> shapes = {{1, 1, 2, 2}, {1, 2, 1, 1}, {1, 3, 4, 4}};
    EXPECT_EQ(layer->output_shapes(shapes), std::vector<Shape>{Shape{}});
    EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(0));
    EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(1));
    EXPECT_FALSE(layer->traits(Device::cpu()).input_is_differentiable(2));
    Context ctx;
    // y: 1 + 2 + 0 + 3 bits, z: 4 + 1 bits, over 4 * 4 pixels.
    Tensor y = Tensor::from_values({0.5, 0.25, 1.0, 0.125}, shapes[0], dtype);
    Tensor z = Tensor::from_values({0.0625, 0.5}, shapes[1], dtype);
    Tensor image(shapes[2], dtype), rate(Shape{}, dtype);
    layer->forward(ctx, {&y, &z, &image}, {&rate});
    EXPECT_NEAR(rate.to_values().at(0), 11.0 / 16.0, 1e-6);
    Tensor drate = Tensor::from_values({1.0}, Shape{}, dtype);
    Tensor dy(shapes[0], dtype), dz(shapes[1], dtype);
    Tensor dimage = Tensor::from_values(std::vector<double>(48, 7.0), shapes[2], dtype);
    layer->backward(ctx, {&y, &z, &image}, {&rate}, {&drate}, {&dy, &dz, &dimage});
    const double ln2 = std::log(2.0);
    EXPECT_NEAR(dz.to_values()[0], -1.0 / (0.0625 * ln2 * 16), 1e-5);
    EXPECT_NEAR(dy.to_values()[3], -1.0 / (0.125 * ln2 * 16), 1e-5);
    EXPECT_EQ(dimage.to_values(), std::vector<double>(48, 0.0));
  }
}

TEST(RateLoss, GradientsOfSeveralLikelihoodInputsCpu) {
  EXPECT_TRUE(testing::gradients_match(check_gradients(
      registry, "RateLoss", {}, {{2, 3, 4, 4}, {2, 2, 1, 1}, {2, 3, 16, 16}}, Device::cpu(), rate_options())));
}

TEST(RateLoss, GradientsOfSeveralLikelihoodInputsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(check_gradients(
      registry, "RateLoss", {}, {{2, 3, 4, 4}, {2, 2, 1, 1}, {2, 3, 16, 16}}, Device::cuda(), rate_options())));
}

TEST(RateLoss, ParityCpuCudaOfSeveralLikelihoodInputs) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions options;
  options.input_filler = positive_likelihoods;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "RateLoss", {}, {{4, 192, 16, 16}, {4, 128, 4, 4}, {4, 3, 256, 256}}, options)));
}

}  // namespace
}  // namespace plexus

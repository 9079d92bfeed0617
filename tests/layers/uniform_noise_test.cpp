// UniformNoise: the noise's range and moments, its dependence on the seed,
// eval-mode rounding, the straight-through gradient (gradient checks in
// training mode on CPU; CUDA in f64 on a GPU), CPU/CUDA parity in eval mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// Input values x_i = 0.37 (i mod 1000) - 100: spread over [-100, 270), so
// f32 rounding of x + u stays below 2^-16, and none is an integer or a half.
std::vector<double> ramp(std::int64_t n) {
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.37 * static_cast<double>(i % 1000) - 100.0;
  return values;
}

// y - x for one training-mode forward of `layer` on `ctx`.
std::vector<double> noise_of(Layer& layer, Context& ctx, const std::vector<double>& x, DType dtype) {
  const Shape shape{static_cast<std::int64_t>(x.size())};
  Tensor input = Tensor::from_values(x, shape, dtype, ctx.device());
  Tensor output(shape, dtype, ctx.device());
  layer.forward(ctx, {&input}, {&output});
  std::vector<double> y = output.to_values(), x_stored = input.to_values();
  for (std::size_t i = 0; i < y.size(); ++i) y[i] -= x_stored[i];
  return y;
}

std::vector<double> noise_with_seed(Device device, std::uint64_t seed, DType dtype, std::int64_t n) {
  auto layer = registry.create("UniformNoise", "noise", {});
  Context ctx(device, seed);
  ctx.set_training(true);
  return noise_of(*layer, ctx, ramp(n), dtype);
}

// u ~ U(-1/2, 1/2): mean 0, variance 1/12. Over n = 100000 draws the sample
// mean has standard deviation sqrt(1/12 / n) = 9.1e-4 and the sample variance
// sqrt((1/80 - 1/144) / n) = 2.4e-4 (E u^4 = 1/80); the bounds below are six
// of those, so a correct generator fails with probability < 1e-8, while
// U(0, 1) (mean 1/2) or U(-1, 1) (variance 1/3) fails by a factor > 90.
// Besides, with n draws, none lands within 1e-3 of an end with probability e^-100.
void expect_uniform_noise(const std::vector<double>& noise) {
  const double n = static_cast<double>(noise.size());
  double sum = 0.0, sum_squares = 0.0;
  for (double u : noise) {
    sum += u;
    sum_squares += u * u;
  }
  const double mean = sum / n;
  const double variance = sum_squares / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 6 * 9.13e-4);
  EXPECT_NEAR(variance, 1.0 / 12.0, 6 * 2.36e-4);
  auto [low, high] = std::minmax_element(noise.begin(), noise.end());
  EXPECT_GE(*low, -0.5);
  EXPECT_LE(*high, 0.5);
  EXPECT_LT(*low, -0.499);
  EXPECT_GT(*high, 0.499);
}

TEST(UniformNoise, TrainingNoiseIsUniformOnMinusHalfToHalf) {
  expect_uniform_noise(noise_with_seed(Device::cpu(), 7, DType::f64, 100000));
}

TEST(UniformNoise, TrainingNoiseStaysInRangeInF32) {
  // In f32, x + u rounds to a float, yet y - x stays within 1/2 (x +- 1/2 are
  // floats and rounding to nearest cannot pass them).
  std::vector<double> noise = noise_with_seed(Device::cpu(), 7, DType::f32, 20000);
  for (double u : noise) {
    ASSERT_GE(u, -0.5);
    ASSERT_LE(u, 0.5);
  }
}

TEST(UniformNoise, SameSeedSameNoiseOtherSeedOtherNoise) {
  const std::vector<double> first = noise_with_seed(Device::cpu(), 11, DType::f64, 1000);
  EXPECT_EQ(noise_with_seed(Device::cpu(), 11, DType::f64, 1000), first);
  const std::vector<double> other = noise_with_seed(Device::cpu(), 12, DType::f64, 1000);
  int equal = 0;
  for (std::size_t i = 0; i < first.size(); ++i) equal += first[i] == other[i];
  EXPECT_EQ(equal, 0);
}

TEST(UniformNoise, SuccessiveForwardsDrawFreshNoise) {
  auto layer = registry.create("UniformNoise", "noise", {});
  Context ctx(Device::cpu(), 3);
  const std::vector<double> x = ramp(100);
  EXPECT_NE(noise_of(*layer, ctx, x, DType::f64), noise_of(*layer, ctx, x, DType::f64));
}

TEST(UniformNoise, EvalRoundsHalvesAwayFromZero) {
  const std::vector<double> x = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 3.7, -3.2, 0.0, 7.0};
  const std::vector<double> expected = {-3, -2, -1, 1, 2, 3, 0, -1, 4, -3, 0, 7};
  for (DType dtype : {DType::f64, DType::f32}) {
    auto layer = registry.create("UniformNoise", "noise", {});
    Context ctx;
    ctx.set_training(false);
    const Shape shape{3, 4};
    Tensor input = Tensor::from_values(x, shape, dtype), output(shape, dtype);
    layer->forward(ctx, {&input}, {&output});
    EXPECT_EQ(output.to_values(), expected) << dtype_name(dtype);
  }
}

TEST(UniformNoise, EvalBackwardPassesGradientStraightThrough) {
  auto layer = registry.create("UniformNoise", "noise", {});
  Context ctx;
  ctx.set_training(false);
  Tensor x = Tensor::from_values({0.2, 1.7, -3.4}, {3}, DType::f64), y({3}, DType::f64);
  Tensor dy = Tensor::from_values({0.5, -2.0, 4.0}, {3}, DType::f64), dx({3}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  EXPECT_EQ(dx.to_values(), dy.to_values());
}

TEST(UniformNoise, GradientsCpu) {
  // Training mode: the gradient check reseeds before every forward, so each
  // evaluation adds the same noise and dy/dx = 1 is checked exactly.
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "UniformNoise", {}, {shape})));
}

TEST(UniformNoise, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "UniformNoise", {}, {shape}, Device::cuda())));
}

TEST(UniformNoise, TrainingNoiseIsUniformOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (DType dtype : {DType::f64, DType::f32}) {
    expect_uniform_noise(noise_with_seed(Device::cuda(), 7, dtype, 100000));
    const std::vector<double> first = noise_with_seed(Device::cuda(), 11, dtype, 1000);
    EXPECT_EQ(noise_with_seed(Device::cuda(), 11, dtype, 1000), first);
    EXPECT_NE(noise_with_seed(Device::cuda(), 12, dtype, 1000), first);
  }
}

TEST(UniformNoise, ParityCpuCudaInEval) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions options;
  options.training = false;  // the devices draw different noise; rounding must agree
  options.input_low = -20.0;
  options.input_high = 20.0;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "UniformNoise", {}, {{4, 8, 16, 16}}, options)));
}

TEST(UniformNoise, RejectsTwoInputs) {
  auto layer = registry.create("UniformNoise", "noise", {});
  try {
    layer->output_shapes({{2}, {2}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'noise' (UniformNoise): takes 1 input, got 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace plexus

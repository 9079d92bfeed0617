// GainUnit: forward by hand (integer, fractional and clamped levels), the
// initial log-gains, backward by hand, gradient checks for x and log_gains
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape and config errors.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// A GainUnit for x of `shape` (f64, CPU) whose log_gains are set to `log_gains` ([K, C], row-major).
std::unique_ptr<Layer> make_layer(std::int64_t levels, const Shape& shape, const std::vector<double>& log_gains) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", levels}});
  const std::vector<Shape> inputs = {shape, {shape[0]}};
  layer->output_shapes(inputs);
  layer->create_parameters(inputs);
  std::mt19937_64 rng(3);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  layer->parameter("log_gains").value = Tensor::from_values(log_gains, {levels, shape[1]}, DType::f64);
  return layer;
}

std::vector<double> forward(Layer& layer, const std::vector<double>& x, const Shape& shape,
                            const std::vector<double>& level) {
  Context ctx;
  Tensor tx = Tensor::from_values(x, shape, DType::f64);
  Tensor tlevel = Tensor::from_values(level, {shape[0]}, DType::f64);
  Tensor y(shape, DType::f64);
  layer.forward(ctx, {&tx, &tlevel}, {&y});
  return y.to_values();
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t j = 0; j < actual.size(); ++j) EXPECT_NEAR(actual[j], expected[j], 1e-12) << "element " << j;
}

// K = 3, C = 2: level 0 gains (1, 2), level 1 gains (3, 1), level 2 gains (4, 0.5).
const std::vector<double> kThreeLevels = {0.0, std::log(2.0), std::log(3.0), 0.0, std::log(4.0), std::log(0.5)};

TEST(GainUnit, ForwardAtIntegerLevelsUsesThatLevelsGain) {
  const Shape shape{3, 2, 2};  // N = 3, C = 2, two positions
  auto layer = make_layer(3, shape, kThreeLevels);
  const std::vector<double> x = {1, -2, 3, 4, /**/ 1, 2, -1, 0.5, /**/ 2, 2, 2, 2};
  // levels 0, 1, 2 (2 is the top level: i = 1, t = 1)
  expect_near_all(forward(*layer, x, shape, {0, 1, 2}), {1, -2, 6, 8, /**/ 3, 6, -1, 0.5, /**/ 8, 8, 1, 1});
}

TEST(GainUnit, ForwardInterpolatesLogGainsBetweenAdjacentLevels) {
  const Shape shape{2, 2};  // rank 2: no spatial dimensions
  auto layer = make_layer(3, shape, kThreeLevels);
  // level 0.5: gains sqrt(1*3), sqrt(2*1); level 1.25: 3^0.75 4^0.25, 1^0.75 0.5^0.25
  expect_near_all(
      forward(*layer, {1, 1, 2, -1}, shape, {0.5, 1.25}),
      {std::sqrt(3.0), std::sqrt(2.0), 2 * std::pow(3.0, 0.75) * std::pow(4.0, 0.25), -std::pow(0.5, 0.25)});
}

TEST(GainUnit, ForwardClampsLevelsOutsideTheRange) {
  const Shape shape{2, 2, 1, 1};
  auto layer = make_layer(3, shape, kThreeLevels);
  // -0.7 acts as level 0, 9 as level 2
  expect_near_all(forward(*layer, {1, 1, 1, 1}, shape, {-0.7, 9.0}), {1, 2, 4, 0.5});
}

TEST(GainUnit, InitialLogGainsArePerLevelForEveryChannel) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", 3}, {"init", {-1, 0, 2.5}}});
  const std::vector<Shape> inputs = {{2, 3, 4, 4}, {2}};
  layer->output_shapes(inputs);
  layer->create_parameters(inputs);
  std::mt19937_64 rng(17);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  EXPECT_EQ(layer->parameter("log_gains").shape, (Shape{3, 3}));
  EXPECT_EQ(layer->parameter("log_gains").value.to_values(), (std::vector<double>{-1, -1, -1, 0, 0, 0, 2.5, 2.5, 2.5}));

  auto plain = registry.create("GainUnit", "gain", {{"levels", 2}});
  plain->output_shapes(inputs);
  plain->create_parameters(inputs);
  plain->initialize_parameters(DType::f64, Device::cpu(), rng);
  EXPECT_EQ(plain->parameter("log_gains").value.to_values(), std::vector<double>(6, 0.0));
}

TEST(GainUnit, BackwardByHand) {
  // K = 2, C = 1: log_gains (0, log 16). Sample 0 at level 0.25: s = log 2, gain 2.
  // Sample 1 at level 5, clamped to 1: i = 0, t = 1, gain 16.
  const Shape shape{2, 1, 2};
  auto layer = make_layer(2, shape, {0.0, std::log(16.0)});
  Parameter& log_gains = layer->parameter("log_gains");
  log_gains.grad = Tensor::from_values({1.0, 1.0}, {2, 1}, DType::f64);
  Context ctx;
  Tensor x = Tensor::from_values({1, 3, 0.5, 1}, shape, DType::f64);
  Tensor level = Tensor::from_values({0.25, 5.0}, {2}, DType::f64);
  Tensor y(shape, DType::f64), dx(shape, DType::f64);
  Tensor dlevel = Tensor::from_values({7.0, 7.0}, {2}, DType::f64);
  Tensor dy = Tensor::from_values({1, -2, 2, 1}, shape, DType::f64);
  layer->forward(ctx, {&x, &level}, {&y});
  layer->backward(ctx, {&x, &level}, {&y}, {&dy}, {&dx, &dlevel});
  expect_near_all(dx.to_values(), {2, -4, 32, 16});  // dy * gain
  // sample 0: S = 1*1 - 2*3 = -5, exp(s) S = -10 -> 0.75 * -10 to level 0, 0.25 * -10 to level 1
  // sample 1: S = 2*0.5 + 1*1 = 2, exp(s) S = 32 -> all to level 1; plus the prefilled 1
  expect_near_all(log_gains.grad.to_values(), {1 - 7.5, 1 - 2.5 + 32});
  EXPECT_EQ(dlevel.to_values(), (std::vector<double>{0.0, 0.0}));  // level carries no gradient
}

TEST(GainUnit, LevelIsNotDifferentiable) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", 4}});
  EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(0));
  EXPECT_FALSE(layer->traits(Device::cpu()).input_is_differentiable(1));
}

// Levels in [-0.5, K - 0.5]: fractional ones, and some below 0 or above K-1 (clamped).
std::function<void(int, std::vector<double>&, std::mt19937_64&)> level_filler(std::int64_t levels) {
  return [levels](int input, std::vector<double>& values, std::mt19937_64& rng) {
    if (input != 1) return;
    std::uniform_real_distribution<double> position(-0.5, static_cast<double>(levels) - 0.5);
    for (double& v : values) v = position(rng);
  };
}

// log_gains off their all-zero start, so each level's gain differs.
void spread_log_gains(const std::string&, std::vector<double>& values, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> log_gain(-1.0, 1.0);
  for (double& v : values) v = log_gain(rng);
}

struct GradientCase {
  std::int64_t levels;
  Shape x;
};

const std::vector<GradientCase> kGradientCases = {{2, {3, 4}}, {3, {4, 3, 5}}, {4, {5, 3, 4, 5}}};

GradCheckOptions gradient_options(std::int64_t levels) {
  GradCheckOptions options;
  options.input_filler = level_filler(levels);
  options.parameter_filler = spread_log_gains;
  return options;
}

TEST(GainUnit, GradientsCpu) {
  for (const GradientCase& c : kGradientCases)
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "GainUnit", {{"levels", c.levels}}, {c.x, {c.x[0]}},
                                                         Device::cpu(), gradient_options(c.levels))));
}

TEST(GainUnit, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const GradientCase& c : kGradientCases)
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "GainUnit", {{"levels", c.levels}}, {c.x, {c.x[0]}},
                                                         Device::cuda(), gradient_options(c.levels))));
}

TEST(GainUnit, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions options;
  options.input_filler = level_filler(6);
  options.parameter_filler = spread_log_gains;
  // The second shape has many rows and long ones, so the grid-stride loops of both backward kernels run.
  for (Shape x : {Shape{4, 8, 16, 16}, Shape{8, 64, 64, 64}, Shape{3, 5}})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "GainUnit", {{"levels", 6}}, {x, {x[0]}}, options)));
  options.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "GainUnit", {{"levels", 6}}, {{3, 5, 7}, {3}}, options)));
}

TEST(GainUnit, RejectsWrongInputCount) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", 3}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 4, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gain' (GainUnit): takes 2 inputs (x, level), got 1")) << message;
}

TEST(GainUnit, RejectsLevelThatIsNotOnePerSample) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", 3}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 4, 4}, {3}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gain' (GainUnit): input level is [3] but must be [2], one value "
                                         "per sample of x [2, 3, 4, 4]"))
      << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 4, 4}, {2, 1}}); });
  EXPECT_TRUE(testing::contains(message, "input level is [2, 1] but must be [2]")) << message;
}

TEST(GainUnit, RejectsXWithoutChannels) {
  auto layer = registry.create("GainUnit", "gain", {{"levels", 3}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{4}, {4}}); });
  EXPECT_TRUE(testing::contains(message, "input x must be [N, C, ...] with at least 2 dimensions (batch and "
                                         "channels), got [4]"))
      << message;
}

TEST(GainUnit, RejectsAnotherChannelCountAfterCreation) {
  auto layer = make_layer(3, {2, 4}, std::vector<double>(12, 0.0));
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 5}, {2}}); });
  EXPECT_TRUE(testing::contains(message, "input x [2, 5] has 5 channels, but log_gains was created as [3, 4] for 4"))
      << message;
}

TEST(GainUnit, RejectsBadParams) {
  std::string message = testing::config_error_of([] { registry.create("GainUnit", "gain", {{"levels", 1}}); });
  EXPECT_TRUE(testing::contains(message, "node 'gain' (GainUnit): parameter 'levels' must be in [2, 4096], got 1"))
      << message;
  message = testing::config_error_of([] { registry.create("GainUnit", "gain", {}); });
  EXPECT_TRUE(testing::contains(message, "parameter 'levels' is required")) << message;
  message = testing::config_error_of([] {
    registry.create("GainUnit", "gain", {{"levels", 3}, {"init", {0.0, 1.0}}});
  });
  EXPECT_TRUE(testing::contains(message, "node 'gain' (GainUnit): parameter 'init' must have one number per level "
                                         "(levels = 3), got 2"))
      << message;
  message = testing::config_error_of([] {
    registry.create("GainUnit", "gain", {{"levels", 2}, {"init", {0.0, "one"}}});
  });
  EXPECT_TRUE(testing::contains(message, "parameter 'init' must be an array of numbers")) << message;
  message = testing::config_error_of([] { registry.create("GainUnit", "gain", {{"levels", 2}, {"gain", 1}}); });
  EXPECT_TRUE(testing::contains(message, "unknown parameter 'gain'")) << message;
}

TEST(GainUnit, DescribesItsParameters) {
  const std::vector<ParameterInfo> parameters = registry.parameters("GainUnit");
  ASSERT_EQ(parameters.size(), 2u);
  EXPECT_EQ(parameters[0].key, "levels");
  EXPECT_TRUE(parameters[0].required);
  EXPECT_EQ(parameters[1].key, "init");
  EXPECT_EQ(parameters[1].kind, "number array");
  EXPECT_FALSE(parameters[1].required);
}

}  // namespace
}  // namespace plexus

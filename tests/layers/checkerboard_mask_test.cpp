// CheckerboardMask: which positions each parity keeps, worked out by hand,
// a reference loop, gradient checks in f64 (CPU; CUDA on a GPU), CPU/CUDA
// parity in f32 and f64, and shape and parameter errors.
#include <gtest/gtest.h>

#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

std::vector<double> masked(const std::string& keep, const std::vector<double>& values, const Shape& shape) {
  auto layer = registry.create("CheckerboardMask", "mask", {{"keep", keep}});
  Context ctx;
  Tensor x = Tensor::from_values(values, shape, DType::f64);
  Tensor y(layer->output_shapes({shape})[0], DType::f64);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

// A 3x4 plane holding 1..12: "even" keeps (0,0), (0,2), (1,1), (1,3), (2,0),
// (2,2); "odd" the other six.
TEST(CheckerboardMask, EachParityKeepsItsColourByHand) {
  const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(masked("even", x, {1, 1, 3, 4}), (std::vector<double>{1, 0, 3, 0, 0, 6, 0, 8, 9, 0, 11, 0}));
  EXPECT_EQ(masked("odd", x, {1, 1, 3, 4}), (std::vector<double>{0, 2, 0, 4, 5, 0, 7, 0, 0, 10, 0, 12}));
}

// Every channel and image restarts the board at its own (0, 0); the two
// parities add up to the input.
TEST(CheckerboardMask, MatchesAReferenceLoopAndTheParitiesSumToTheInput) {
  const Shape shape{2, 3, 5, 3};
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> uniform(-2, 2);
  std::vector<double> x(shape_numel(shape));
  for (double& v : x) v = uniform(rng);
  std::vector<double> expected_even(x.size());
  for (std::int64_t plane = 0; plane < 6; ++plane)
    for (std::int64_t h = 0; h < 5; ++h)
      for (std::int64_t w = 0; w < 3; ++w) {
        const std::size_t i = static_cast<std::size_t>((plane * 5 + h) * 3 + w);
        expected_even[i] = (h + w) % 2 == 0 ? x[i] : 0.0;
      }
  const std::vector<double> even = masked("even", x, shape), odd = masked("odd", x, shape);
  EXPECT_EQ(even, expected_even);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(even[i] + odd[i], x[i]) << i;
}

TEST(CheckerboardMask, GradientsCpu) {
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "CheckerboardMask", {{"keep", "even"}}, {{2, 3, 4, 5}})));
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "CheckerboardMask", {{"keep", "odd"}}, {{1, 2, 3, 3}})));
}

TEST(CheckerboardMask, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "CheckerboardMask", {{"keep", "even"}}, {{2, 3, 4, 5}}, Device::cuda())));
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "CheckerboardMask", {{"keep", "odd"}}, {{1, 2, 3, 3}}, Device::cuda())));
}

TEST(CheckerboardMask, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "CheckerboardMask", {{"keep", "odd"}}, {{4, 8, 17, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "CheckerboardMask", {{"keep", "even"}}, {{2, 5, 7, 9}}, f64)));
}

TEST(CheckerboardMask, RejectsInputsThatAreNotNCHW) {
  auto layer = registry.create("CheckerboardMask", "ctx_mask", {{"keep", "odd"}});
  const std::string message = testing::shape_error_of([&] { layer->output_shapes({{4, 4, 4}}); });
  EXPECT_TRUE(testing::contains(
      message, "node 'ctx_mask' (CheckerboardMask): input is [4, 4, 4]; CheckerboardMask needs [N, C, H, W]"))
      << message;
}

TEST(CheckerboardMask, RejectsABadOrMissingParity) {
  const std::string bad = testing::config_error_of([] {
    registry.create("CheckerboardMask", "ctx_mask", {{"keep", "anchors"}});
  });
  EXPECT_TRUE(testing::contains(bad, "node 'ctx_mask' (CheckerboardMask)")) << bad;
  EXPECT_TRUE(testing::contains(bad, "'keep' must be \"even\"")) << bad;
  EXPECT_TRUE(testing::contains(bad, "got \"anchors\"")) << bad;
  const std::string missing =
      testing::config_error_of([] { registry.create("CheckerboardMask", "ctx_mask", nlohmann::json::object()); });
  EXPECT_TRUE(testing::contains(missing, "keep")) << missing;
  const std::string number = testing::config_error_of([] {
    registry.create("CheckerboardMask", "ctx_mask", {{"keep", 1}});
  });
  EXPECT_TRUE(testing::contains(number, "keep")) << number;
}

}  // namespace
}  // namespace plexus

// PixelShuffle: PyTorch's channel order on tiny examples worked out by hand,
// a reference loop written from the output side, gradient checks (CPU; CUDA
// in f64 on a GPU), CPU/CUDA parity, shape and parameter errors.
#include <gtest/gtest.h>

#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

std::vector<double> shuffle(std::int64_t r, const std::vector<double>& values, const Shape& shape) {
  auto layer = registry.create("PixelShuffle", "ps", {{"upscale_factor", r}});
  Context ctx;
  Tensor x = Tensor::from_values(values, shape, DType::f64);
  Tensor y(layer->output_shapes({shape})[0], DType::f64);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

// torch.nn.PixelShuffle(2)(torch.arange(4.).reshape(1, 4, 1, 1)) is
// [[[[0, 1], [2, 3]]]]: input channel i*r + j lands at row i, column j.
TEST(PixelShuffle, OneBlockByHand) {
  EXPECT_EQ(shuffle(2, {0, 1, 2, 3}, {1, 4, 1, 1}), (std::vector<double>{0, 1, 2, 3}));
}

// x[k, 0, w] = 10k + w for k < 4, w < 2 ([1, 4, 1, 2]) gives y [1, 1, 2, 4]:
// row i, column 2w + j holds x[2i + j, 0, w].
TEST(PixelShuffle, TwoBlocksAcrossByHand) {
  EXPECT_EQ(shuffle(2, {0, 1, 10, 11, 20, 21, 30, 31}, {1, 4, 1, 2}),
            (std::vector<double>{0, 10, 1, 11, /* row 1 */ 20, 30, 21, 31}));
}

// Output channel c takes input channels 4c .. 4c + 3 (PyTorch), not every
// C-th channel: [1, 8, 1, 1] holding 0..7 gives [1, 2, 2, 2] holding 0..7.
TEST(PixelShuffle, OutputChannelsTakeConsecutiveInputChannels) {
  EXPECT_EQ(shuffle(2, {0, 1, 2, 3, 4, 5, 6, 7}, {1, 8, 1, 1}), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// y[n, c, oy, ox] = x[n, c*r*r + (oy % r)*r + (ox % r), oy / r, ox / r].
TEST(PixelShuffle, MatchesAReferenceLoopOverOutputs) {
  const std::int64_t r = 3, batch = 2, channels = 2, height = 2, width = 3;
  Shape shape{batch, channels * r * r, height, width};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> x(shape_numel(shape));
  for (double& value : x) value = uniform(rng);
  std::vector<double> expected;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t oy = 0; oy < height * r; ++oy)
        for (std::int64_t ox = 0; ox < width * r; ++ox) {
          std::int64_t k = c * r * r + (oy % r) * r + ox % r;
          expected.push_back(x[((n * channels * r * r + k) * height + oy / r) * width + ox / r]);
        }
  EXPECT_EQ(shuffle(r, x, shape), expected);
}

TEST(PixelShuffle, FactorOneIsTheIdentity) {
  EXPECT_EQ(shuffle(1, {1, 2, 3, 4, 5, 6}, {1, 2, 1, 3}), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(PixelShuffle, GradientsCpu) {
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "PixelShuffle", {{"upscale_factor", 2}}, {{2, 8, 3, 4}})));
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "PixelShuffle", {{"upscale_factor", 3}}, {{1, 9, 2, 2}})));
}

TEST(PixelShuffle, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "PixelShuffle", {{"upscale_factor", 2}}, {{2, 8, 3, 4}}, Device::cuda())));
}

TEST(PixelShuffle, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "PixelShuffle", {{"upscale_factor", 2}}, {{4, 12, 16, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "PixelShuffle", {{"upscale_factor", 3}}, {{2, 18, 5, 7}}, f64)));
}

TEST(PixelShuffle, RejectsChannelsNotAMultipleOfRSquared) {
  auto layer = registry.create("PixelShuffle", "up", {{"upscale_factor", 2}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{1, 6, 4, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'up' (PixelShuffle): input [1, 6, 4, 4] has 6 channels, not a "
                                         "multiple of upscale_factor^2 = 4"))
      << message;
}

TEST(PixelShuffle, RejectsInputsThatAreNotNCHW) {
  auto layer = registry.create("PixelShuffle", "up", {{"upscale_factor", 2}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{4, 4, 4}}); });
  EXPECT_TRUE(
      testing::contains(message, "node 'up' (PixelShuffle): input is [4, 4, 4]; PixelShuffle needs [N, C, H, W]"))
      << message;
}

TEST(PixelShuffle, RejectsBadFactors) {
  std::string zero = testing::config_error_of([] { registry.create("PixelShuffle", "up", {{"upscale_factor", 0}}); });
  EXPECT_TRUE(testing::contains(zero, "node 'up' (PixelShuffle)")) << zero;
  EXPECT_TRUE(testing::contains(zero, "upscale_factor")) << zero;
  std::string missing =
      testing::config_error_of([] { registry.create("PixelShuffle", "up", nlohmann::json::object()); });
  EXPECT_TRUE(testing::contains(missing, "upscale_factor")) << missing;
}

}  // namespace
}  // namespace plexus

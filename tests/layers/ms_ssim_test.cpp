// MSSSIM: 1 for identical images, the value against a direct per-pixel
// implementation written here (2-D windows, no separable passes), a value
// that falls with noise, f64 gradient checks (CPU; CUDA on a GPU), CPU/CUDA
// parity in f32 and f64, and bad shapes refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// A smooth pattern shared by both images plus noise of its own: similar
// images, as a reconstruction and its target are (independent noise would
// give structure terms near 0, where relu cuts the gradient).
std::vector<double> image_values(const Shape& shape, double noise, std::mt19937_64& rng) {
  const std::int64_t h = shape[2], w = shape[3];
  std::uniform_real_distribution<double> uniform(-noise, noise);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t plane = static_cast<std::int64_t>(i) / (h * w), r = (i / w) % h, c = i % w;
    values[i] = 0.5 + 0.25 * std::sin(0.21 * r + 0.13 * c + plane) + uniform(rng);
  }
  return values;
}

double ms_ssim_of(const std::vector<double>& x, const std::vector<double>& y, const Shape& shape, DType dtype) {
  auto layer = registry.create("MSSSIM", "ms_ssim", {});
  EXPECT_EQ(layer->output_shapes({shape, shape}), std::vector<Shape>{Shape{}});
  Context ctx;
  Tensor tx = Tensor::from_values(x, shape, dtype), ty = Tensor::from_values(y, shape, dtype);
  Tensor out(Shape{}, dtype);
  layer->forward(ctx, {&tx, &ty}, {&out});
  return out.to_values().at(0);
}

// The definition, directly: per scale, every 11x11 window weighted by the
// 2-D Gaussian g(i) g(j); pooling by 2x2 means with zeros past an odd side.
struct Image {
  std::int64_t h, w;
  std::vector<double> v;
  double at(std::int64_t r, std::int64_t c) const { return r < 0 || c < 0 || r >= h || c >= w ? 0.0 : v[r * w + c]; }
};

Image halve(const Image& in) {
  Image out{(in.h + 1) / 2, (in.w + 1) / 2, {}};
  for (std::int64_t i = 0; i < out.h; ++i)
    for (std::int64_t j = 0; j < out.w; ++j) {
      const std::int64_t r = 2 * i - in.h % 2, c = 2 * j - in.w % 2;
      out.v.push_back((in.at(r, c) + in.at(r + 1, c) + in.at(r, c + 1) + in.at(r + 1, c + 1)) / 4);
    }
  return out;
}

double reference_ms_ssim(const std::vector<double>& x, const std::vector<double>& y, const Shape& shape) {
  const double weights[5] = {0.0448, 0.2856, 0.3001, 0.2363, 0.1333};
  double g[11], total = 0;
  for (int k = 0; k < 11; ++k) total += g[k] = std::exp(-(k - 5) * (k - 5) / (2 * 1.5 * 1.5));
  for (double& value : g) value /= total;
  const double c1 = 1e-4, c2 = 9e-4;
  const std::int64_t planes = shape[0] * shape[1], h = shape[2], w = shape[3];
  double sum = 0;
  for (std::int64_t p = 0; p < planes; ++p) {
    Image a{h, w, std::vector<double>(x.begin() + p * h * w, x.begin() + (p + 1) * h * w)};
    Image b{h, w, std::vector<double>(y.begin() + p * h * w, y.begin() + (p + 1) * h * w)};
    double product = 1;
    for (int s = 0; s < 5; ++s) {
      double mean = 0;
      for (std::int64_t i = 0; i + 11 <= a.h; ++i)
        for (std::int64_t j = 0; j + 11 <= a.w; ++j) {
          double mx = 0, my = 0, exx = 0, eyy = 0, exy = 0;
          for (int u = 0; u < 11; ++u)
            for (int t = 0; t < 11; ++t) {
              const double weight = g[u] * g[t], va = a.at(i + u, j + t), vb = b.at(i + u, j + t);
              mx += weight * va;
              my += weight * vb;
              exx += weight * va * va;
              eyy += weight * vb * vb;
              exy += weight * va * vb;
            }
          const double cs = (2 * (exy - mx * my) + c2) / (exx - mx * mx + eyy - my * my + c2);
          const double luminance = (2 * mx * my + c1) / (mx * mx + my * my + c1);
          mean += s < 4 ? cs : cs * luminance;
        }
      mean /= static_cast<double>((a.h - 10) * (a.w - 10));
      product *= std::pow(std::max(mean, 0.0), weights[s]);
      a = halve(a);
      b = halve(b);
    }
    sum += product;
  }
  return sum / static_cast<double>(planes);
}

TEST(MSSSIM, IdenticalImagesGiveOne) {
  std::mt19937_64 rng(1);
  const Shape shape{2, 3, 161, 161};
  const std::vector<double> x = image_values(shape, 0.1, rng);
  for (DType dtype : {DType::f64, DType::f32})
    EXPECT_NEAR(ms_ssim_of(x, x, shape, dtype), 1.0, 1e-6) << dtype_name(dtype);
}

TEST(MSSSIM, MatchesADirectPerPixelImplementation) {
  std::mt19937_64 rng(2);
  // Odd and even sides: 161 -> 81 -> 41 -> 21 -> 11 and 170 -> 85 -> 43 -> 22 -> 11.
  const Shape shape{1, 2, 161, 170};
  const std::vector<double> x = image_values(shape, 0.1, rng), y = image_values(shape, 0.1, rng);
  const double expected = reference_ms_ssim(x, y, shape);
  EXPECT_GT(expected, 0.2);
  EXPECT_LT(expected, 0.99);
  EXPECT_NEAR(ms_ssim_of(x, y, shape, DType::f64), expected, 1e-12);
  EXPECT_NEAR(ms_ssim_of(x, y, shape, DType::f32), expected, 1e-5);
}

TEST(MSSSIM, FallsAsTheNoiseGrows) {
  const Shape shape{1, 3, 176, 176};
  double previous = 1.0;
  for (double noise : {0.02, 0.1, 0.3}) {
    std::mt19937_64 rng(3);
    const std::vector<double> x = image_values(shape, 0.0, rng), y = image_values(shape, noise, rng);
    const double value = ms_ssim_of(x, y, shape, DType::f64);
    EXPECT_LT(value, previous) << "noise " << noise;
    previous = value;
  }
}

// Correlated images (the shared pattern), positions sampled across each
// input; the tolerance is absolute in effect (gradients are ~1e-5 each, far
// below the formula's floor of 1), so it is set well below them.
GradCheckOptions similar_images(const Shape& shape) {
  GradCheckOptions options;
  options.tolerance = 1e-9;
  options.max_elements_per_tensor = 40;
  options.input_filler = [shape](int, std::vector<double>& values, std::mt19937_64& rng) {
    values = image_values(shape, 0.08, rng);
  };
  return options;
}

TEST(MSSSIM, GradientsCpu) {
  for (const Shape& shape : {Shape{1, 2, 161, 161}, Shape{2, 1, 164, 170}})
    EXPECT_TRUE(testing::gradients_match(
        check_gradients(registry, "MSSSIM", {}, {shape, shape}, Device::cpu(), similar_images(shape))));
}

TEST(MSSSIM, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Shape& shape : {Shape{1, 2, 161, 161}, Shape{2, 1, 164, 170}})
    EXPECT_TRUE(testing::gradients_match(
        check_gradients(registry, "MSSSIM", {}, {shape, shape}, Device::cuda(), similar_images(shape))));
}

TEST(MSSSIM, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (DType dtype : {DType::f32, DType::f64}) {
    const Shape shape{4, 3, 192, 177};
    ParityOptions options;
    options.dtype = dtype;
    options.tolerance = dtype == DType::f64 ? 1e-9 : 1e-3;
    options.input_filler = [shape](int, std::vector<double>& values, std::mt19937_64& rng) {
      values = image_values(shape, 0.08, rng);
    };
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MSSSIM", {}, {shape, shape}, options)))
        << dtype_name(dtype);
  }
}

TEST(MSSSIM, RejectsImagesTooSmallForFiveScales) {
  auto layer = registry.create("MSSSIM", "ms_ssim", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 160, 200}, {2, 3, 160, 200}}); });
  EXPECT_TRUE(testing::contains(message, "node 'ms_ssim' (MSSSIM): images [2, 3, 160, 200] are too small")) << message;
  EXPECT_TRUE(testing::contains(message, "at least 161 pixels")) << message;
  EXPECT_EQ(layer->output_shapes({{1, 3, 161, 161}, {1, 3, 161, 161}}), std::vector<Shape>{Shape{}});
}

TEST(MSSSIM, RejectsMismatchedOrNonImageInputs) {
  auto layer = registry.create("MSSSIM", "ms_ssim", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{1, 3, 200, 200}, {1, 3, 200, 208}}); });
  EXPECT_TRUE(testing::contains(message, "must have the same shape")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{3, 200, 200}, {3, 200, 200}}); });
  EXPECT_TRUE(testing::contains(message, "must be images [N, C, H, W]")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{1, 3, 200, 200}}); });
  EXPECT_TRUE(testing::contains(message, "takes 2 inputs")) << message;
}

}  // namespace
}  // namespace plexus

// GDN and IGDN: forward against a naive per-pixel loop, initial parameters,
// gradient checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, the lower
// bound's gradient, the backward contract, bad shapes and params.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

constexpr double kBetaMin = 1e-6;
constexpr double kReparamOffset = 3.814697265625e-06;  // 2^-18
constexpr double kPedestal = kReparamOffset * kReparamOffset;
const double kBetaBound = std::sqrt(kBetaMin + kPedestal);
constexpr double kGammaBound = kReparamOffset;

// The reparametrisation, written out here independently of the layer.
double effective(double stored, double bound) {
  double clipped = std::max(stored, bound);
  return clipped * clipped - kPedestal;
}

struct Image {
  Shape shape;
  std::int64_t images, channels, pixels;
  explicit Image(Shape s) : shape(std::move(s)), images(shape[0]), channels(shape[1]), pixels(1) {
    for (std::size_t axis = 2; axis < shape.size(); ++axis) pixels *= shape[axis];
  }
  std::size_t at(std::int64_t b, std::int64_t c, std::int64_t p) const {
    return static_cast<std::size_t>((b * channels + c) * pixels + p);
  }
};

// n_i = beta_i + sum_j gamma_ij x_j^2 for every element, by a plain loop.
std::vector<double> naive_norm(const Image& image, const std::vector<double>& x, const std::vector<double>& beta,
                               const std::vector<double>& gamma) {
  std::vector<double> norm(x.size());
  const std::int64_t c = image.channels;
  for (std::int64_t b = 0; b < image.images; ++b)
    for (std::int64_t p = 0; p < image.pixels; ++p)
      for (std::int64_t i = 0; i < c; ++i) {
        double n = effective(beta[static_cast<std::size_t>(i)], kBetaBound);
        for (std::int64_t j = 0; j < c; ++j) {
          double v = x[image.at(b, j, p)];
          n += effective(gamma[static_cast<std::size_t>(i * c + j)], kGammaBound) * v * v;
        }
        norm[image.at(b, i, p)] = n;
      }
  return norm;
}

std::vector<double> naive_forward(const Image& image, const std::vector<double>& x, const std::vector<double>& beta,
                                  const std::vector<double>& gamma, bool inverse) {
  std::vector<double> norm = naive_norm(image, x, beta, gamma);
  std::vector<double> y(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) y[e] = inverse ? x[e] * std::sqrt(norm[e]) : x[e] / std::sqrt(norm[e]);
  return y;
}

std::vector<double> uniform_values(std::size_t n, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

// Stored beta near 1 and gamma off the identity: every entry random,
// positive and far above its bound, so finite differences never cross it.
void spread_parameters(const std::string& name, std::vector<double>& values, std::mt19937_64& rng) {
  values = name == "beta" ? uniform_values(values.size(), 0.7, 1.3, rng) : uniform_values(values.size(), 0.1, 0.6, rng);
}

GradCheckOptions spread_options() {
  GradCheckOptions options;
  options.parameter_filler = spread_parameters;
  return options;
}

ParityOptions spread_parity_options() {
  ParityOptions options;
  options.parameter_filler = spread_parameters;
  return options;
}

std::unique_ptr<Layer> make_layer(const std::string& type, const Shape& shape, const nlohmann::json& params = {}) {
  auto layer = registry.create(type, "g", params);
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(5);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  return layer;
}

void set_parameter(Layer& layer, const std::string& name, const std::vector<double>& values) {
  Parameter& p = layer.parameter(name);
  p.value = Tensor::from_values(values, p.shape, DType::f64);
}

std::vector<double> run_forward(Layer& layer, const Shape& shape, const std::vector<double>& x) {
  Context ctx;
  Tensor input = Tensor::from_values(x, shape, DType::f64);
  Tensor output(shape, DType::f64);
  layer.forward(ctx, {&input}, {&output});
  return output.to_values();
}

void expect_near_relative(const std::vector<double>& expected, const std::vector<double>& actual, double tolerance) {
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t e = 0; e < expected.size(); ++e)
    EXPECT_NEAR(expected[e], actual[e], tolerance * std::max(1.0, std::abs(expected[e]))) << "element " << e;
}

TEST(GDN, ForwardMatchesNaivePerPixelLoop) {
  std::mt19937_64 rng(11);
  for (const std::string type : {"GDN", "IGDN"}) {
    for (Shape shape : {Shape{2, 3, 4, 5}, Shape{1, 7, 3}, Shape{4, 5}}) {
      Image image(shape);
      auto layer = make_layer(type, shape);
      std::vector<double> beta = uniform_values(static_cast<std::size_t>(image.channels), 0.5, 1.5, rng);
      std::vector<double> gamma =
          uniform_values(static_cast<std::size_t>(image.channels * image.channels), 0.0, 0.8, rng);
      set_parameter(*layer, "beta", beta);
      set_parameter(*layer, "gamma", gamma);
      std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -2.0, 2.0, rng);
      expect_near_relative(naive_forward(image, x, beta, gamma, type == "IGDN"), run_forward(*layer, shape, x), 1e-12);
    }
  }
}

TEST(GDN, InitialParametersAreBetaOneGammaTenthIdentity) {
  const Shape shape{2, 4, 3, 3};
  for (const std::string type : {"GDN", "IGDN"}) {
    auto layer = make_layer(type, shape);
    std::vector<double> beta = layer->parameter("beta").value.to_values();
    std::vector<double> gamma = layer->parameter("gamma").value.to_values();
    for (double stored : beta) EXPECT_NEAR(effective(stored, kBetaBound), 1.0, 1e-12);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        EXPECT_NEAR(effective(gamma[static_cast<std::size_t>(i * 4 + j)], kGammaBound), i == j ? 0.1 : 0.0, 1e-12)
            << "gamma " << i << "," << j;
    // So each channel is normalised by itself alone: y = x (1 + 0.1 x^2)^-+1/2.
    std::mt19937_64 rng(3);
    std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -3.0, 3.0, rng);
    std::vector<double> expected(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) {
      double root = std::sqrt(1.0 + 0.1 * x[e] * x[e]);
      expected[e] = type == "IGDN" ? x[e] * root : x[e] / root;
    }
    expect_near_relative(expected, run_forward(*layer, shape, x), 1e-12);
  }
}

TEST(GDN, GammaInitParamSetsTheDiagonal) {
  auto layer = make_layer("GDN", {1, 3, 2, 2}, {{"gamma_init", 0.25}});
  std::vector<double> gamma = layer->parameter("gamma").value.to_values();
  EXPECT_NEAR(effective(gamma[0], kGammaBound), 0.25, 1e-12);
  EXPECT_NEAR(effective(gamma[4], kGammaBound), 0.25, 1e-12);
  EXPECT_NEAR(effective(gamma[1], kGammaBound), 0.0, 1e-15);
}

TEST(GDN, GradientsCpu) {
  for (const std::string type : {"GDN", "IGDN"})
    for (Shape shape : {Shape{1, 3, 4, 5}, Shape{2, 5, 3, 3}, Shape{2, 1, 2, 2}, Shape{3, 4}})
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, type, {}, {shape}, Device::cpu(), spread_options())));
}

// The channel counts of larger models (192 in the hyperprior models, 256).
// gamma has C^2 elements, so 300 random elements of each tensor are checked.
GradCheckOptions wide_options() {
  GradCheckOptions options = spread_options();
  options.max_elements_per_tensor = 300;
  return options;
}

const std::vector<Shape> kWideShapes = {Shape{1, 64, 3, 3}, Shape{2, 128, 3, 1}, Shape{1, 192, 2, 3},
                                        Shape{1, 256, 2, 2}};

TEST(GDN, GradientsCpuWideChannels) {
  for (const Shape& shape : kWideShapes)
    for (const std::string type : {"GDN", "IGDN"})
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, type, {}, {shape}, Device::cpu(), wide_options())));
}

TEST(GDN, GradientsCpuAtInitialParameters) {
  // Off-diagonal gamma sits exactly at its bound; the finite difference is
  // one-sided there, so only the input is checked (parameters: see LowerBound tests).
  GradCheckOptions options;
  for (const std::string type : {"GDN", "IGDN"}) {
    auto result = check_gradients(registry, type, {}, {{2, 3, 2, 2}}, Device::cpu(), options);
    std::int64_t input_failures = 0;
    for (const auto& m : result.mismatches) input_failures += m.tensor == "input 0";
    EXPECT_EQ(input_failures, 0) << result.report();
  }
}

TEST(GDN, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const std::string type : {"GDN", "IGDN"}) {
    // Fused kernels, C padded to 32 and 64.
    for (Shape shape : {Shape{2, 5, 3, 3}, Shape{2, 1, 2, 2}, Shape{3, 4}, Shape{1, 40, 3, 2}})
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, type, {}, {shape}, Device::cuda(), spread_options())));
  }
  // The general path (C = 65 > 64 in f64): dgamma as one product per image
  // (GDN here) and as one product over all rows of a rank-2 input (IGDN).
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "GDN", {}, {{2, 65, 2, 1}}, Device::cuda(), spread_options())));
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "IGDN", {}, {{3, 65}}, Device::cuda(), spread_options())));
}

TEST(GDN, GradientsCudaWideChannels) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // f64 on CUDA: the fused kernel at C = 64, the general path above.
  for (const Shape& shape : kWideShapes)
    for (const std::string type : {"GDN", "IGDN"})
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, type, {}, {shape}, Device::cuda(), wide_options())));
}

TEST(GDN, ParityCpuCudaWideChannels) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // f32 without TF32: fused FP32 kernels up to C = 128, the general path at 192 and 256.
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {64, 128, 192, 256})
      for (Shape shape : {Shape{2, channels, 8, 12}, Shape{2, channels, 5, 7}})
        EXPECT_TRUE(testing::outputs_match(check_parity(registry, type, {}, {shape}, spread_parity_options())));
}

// One forward and backward of `type` on `device` in `dtype` (TF32 allowed or
// not), from f64 parameters, input and output gradient. Output and input
// gradient start as NaN, so an element a kernel leaves unwritten shows.
// Without `input_grad` the backward gets no input gradient to write.
struct Pass {
  std::vector<double> y, dx, beta_grad, gamma_grad;
};

Pass run_pass(const std::string& type, const Shape& shape, Device device, DType dtype, Precision precision,
              const std::vector<double>& beta, const std::vector<double>& gamma, const std::vector<double>& x,
              const std::vector<double>& dy, bool input_grad = true) {
  const std::int64_t channels = shape[1];
  auto layer = registry.create(type, "g", {});
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 unused(0);
  layer->initialize_parameters(dtype, device, unused);
  layer->parameter("beta").value = Tensor::from_values(beta, {channels}, dtype, device);
  layer->parameter("gamma").value = Tensor::from_values(gamma, {channels, channels}, dtype, device);
  Context ctx(device);
  ctx.set_precision(precision);
  const std::vector<double> poison(x.size(), std::numeric_limits<double>::quiet_NaN());
  Tensor input = Tensor::from_values(x, shape, dtype, device);
  Tensor output = Tensor::from_values(poison, shape, dtype, device);
  Tensor output_grad = Tensor::from_values(dy, shape, dtype, device);
  Tensor input_gradient = Tensor::from_values(poison, shape, dtype, device);
  layer->forward(ctx, {&input}, {&output});
  layer->backward(ctx, {&input}, {&output}, {&output_grad}, {input_grad ? &input_gradient : nullptr});
  return {output.to_values(), input_gradient.to_values(), layer->parameter("beta").grad.to_values(),
          layer->parameter("gamma").grad.to_values()};
}

// ||actual - expected|| / ||expected||; infinite when any element is not finite.
double relative_error(const std::vector<double>& expected, const std::vector<double>& actual) {
  double difference = 0.0, norm = 0.0;
  for (std::size_t e = 0; e < expected.size(); ++e) {
    if (!std::isfinite(actual[e])) return std::numeric_limits<double>::infinity();
    difference += (actual[e] - expected[e]) * (actual[e] - expected[e]);
    norm += expected[e] * expected[e];
  }
  return std::sqrt(difference / norm);
}

// f32 at tf32 and at bf16 precision (the tensor-core kernels with TF32 and
// with BF16 products; C = 256 on the two-half kernels) against the f64 CPU
// layer: output, input gradient and both parameter gradients within 2e-3
// relative at TF32 (10 mantissa bits: ~5e-4 per rounded operand) and 1e-2 at
// BF16 (7 bits, 8x coarser: ~2e-3 RMS per product; the sums over channels
// and pixels keep that size, see tensor_core_reference.h). The TF32 forward
// must also differ from f64 by more than f32 rounding alone would (1e-6),
// and the BF16 forward by more than twice the TF32 one: each shows that its
// product ran.
TEST(GDN, TensorCoreKernelsMatchF64ReferenceCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(31);
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {3, 64, 128, 192, 256})
      // 96 pixels per image (vector access; 3 images span 4.5 64-pixel tiles)
      // and 99 (scalar access, tiles straddle images).
      for (Shape shape : {Shape{3, channels, 8, 12}, Shape{2, channels, 9, 11}}) {
        SCOPED_TRACE(type + " " + shape_str(shape));
        const auto c = static_cast<std::size_t>(channels);
        const std::vector<double> beta = uniform_values(c, 0.7, 1.3, rng);
        const std::vector<double> gamma = uniform_values(c * c, 0.1, 0.6, rng);
        const std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
        const std::vector<double> dy = uniform_values(x.size(), -1.0, 1.0, rng);
        const Pass reference = run_pass(type, shape, Device::cpu(), DType::f64, Precision::f32, beta, gamma, x, dy);
        double tf32_y_error = 0.0;
        for (const Precision precision : {Precision::tf32, Precision::bf16}) {
          SCOPED_TRACE(precision_name(precision));
          const double tolerance = precision == Precision::bf16 ? 1e-2 : 2e-3;
          const Pass pass = run_pass(type, shape, Device::cuda(), DType::f32, precision, beta, gamma, x, dy);
          const double y_error = relative_error(reference.y, pass.y);
          EXPECT_LE(y_error, tolerance);
          EXPECT_LE(relative_error(reference.dx, pass.dx), tolerance);
          EXPECT_LE(relative_error(reference.beta_grad, pass.beta_grad), tolerance);
          EXPECT_LE(relative_error(reference.gamma_grad, pass.gamma_grad), tolerance);
          if (precision == Precision::tf32) {
            EXPECT_GT(y_error, 1e-6);
            tf32_y_error = y_error;
          } else {
            EXPECT_GT(y_error, 2.0 * tf32_y_error);
          }
          std::cout << "[ " << precision_name(precision) << "     ] " << type << " " << shape_str(shape) << ": y "
                    << y_error << ", dx " << relative_error(reference.dx, pass.dx) << ", dbeta "
                    << relative_error(reference.beta_grad, pass.beta_grad) << ", dgamma "
                    << relative_error(reference.gamma_grad, pass.gamma_grad) << "\n";
        }
      }
}

// The parameter gradients are per-block partial sums added in a fixed order:
// two identical backward passes give identical bits (C = 128: one fused
// kernel; C = 256: two kernels filling the same partials), with TF32 and
// with BF16 products.
TEST(GDN, TensorCoreParameterGradientsAreDeterministicCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(32);
  for (const Precision precision : {Precision::tf32, Precision::bf16})
    for (std::int64_t channels : {128, 256}) {
      SCOPED_TRACE(std::string(precision_name(precision)) + " " + std::to_string(channels));
      const Shape shape{4, channels, 32, 32};
      const auto c = static_cast<std::size_t>(channels);
      const std::vector<double> beta = uniform_values(c, 0.7, 1.3, rng);
      const std::vector<double> gamma = uniform_values(c * c, 0.1, 0.6, rng);
      const std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
      const std::vector<double> dy = uniform_values(x.size(), -1.0, 1.0, rng);
      const Pass first = run_pass("GDN", shape, Device::cuda(), DType::f32, precision, beta, gamma, x, dy);
      const Pass second = run_pass("GDN", shape, Device::cuda(), DType::f32, precision, beta, gamma, x, dy);
      EXPECT_EQ(first.beta_grad, second.beta_grad);
      EXPECT_EQ(first.gamma_grad, second.gamma_grad);
      EXPECT_EQ(first.dx, second.dx);
    }
}

// The TF32 backward keeps its per-block partial sums in a scratch tensor
// between calls, allocated again when the number of blocks changes: one layer
// run on a 5-tile batch, a 2-tile batch and the 5-tile batch again gives each
// time the bits a fresh layer gives (C = 128: one kernel; C = 256: two
// kernels filling the same partials).
TEST(GDN, Tf32BackwardReusesItsScratchAcrossShapesCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(34);
  for (std::int64_t channels : {128, 256}) {
    SCOPED_TRACE(channels);
    const auto c = static_cast<std::size_t>(channels);
    const std::vector<double> beta = uniform_values(c, 0.7, 1.3, rng);
    const std::vector<double> gamma = uniform_values(c * c, 0.1, 0.6, rng);
    const Shape larger{3, channels, 8, 12}, smaller{1, channels, 8, 12};
    auto layer = registry.create("GDN", "g", {});
    layer->output_shapes({larger});
    layer->create_parameters({larger});
    std::mt19937_64 unused(0);
    layer->initialize_parameters(DType::f32, Device::cuda(), unused);
    layer->parameter("beta").value = Tensor::from_values(beta, {channels}, DType::f32, Device::cuda());
    layer->parameter("gamma").value = Tensor::from_values(gamma, {channels, channels}, DType::f32, Device::cuda());
    Context ctx(Device::cuda());
    ctx.set_allow_tf32(true);
    for (const Shape& shape : {larger, smaller, larger}) {
      SCOPED_TRACE(shape_str(shape));
      const std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
      const std::vector<double> dy = uniform_values(x.size(), -1.0, 1.0, rng);
      const Pass fresh = run_pass("GDN", shape, Device::cuda(), DType::f32, Precision::tf32, beta, gamma, x, dy);
      layer->parameter("beta").grad.fill_zero();
      layer->parameter("gamma").grad.fill_zero();
      Tensor input = Tensor::from_values(x, shape, DType::f32, Device::cuda());
      Tensor output(shape, DType::f32, Device::cuda());
      Tensor output_grad = Tensor::from_values(dy, shape, DType::f32, Device::cuda());
      Tensor input_gradient(shape, DType::f32, Device::cuda());
      layer->forward(ctx, {&input}, {&output});
      layer->backward(ctx, {&input}, {&output}, {&output_grad}, {&input_gradient});
      EXPECT_EQ(fresh.dx, input_gradient.to_values());
      EXPECT_EQ(fresh.beta_grad, layer->parameter("beta").grad.to_values());
      EXPECT_EQ(fresh.gamma_grad, layer->parameter("gamma").grad.to_values());
    }
  }
}

// Without an input gradient the tensor-core kernels skip dx (at C = 256 the
// second kernel's gamma^T q too) and give the same parameter gradients, bit
// for bit, with TF32 and with BF16 products.
TEST(GDN, TensorCoreParameterGradientsWithoutInputGradientCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(33);
  for (const Precision precision : {Precision::tf32, Precision::bf16})
    for (const std::string type : {"GDN", "IGDN"})
      for (std::int64_t channels : {128, 256}) {
        SCOPED_TRACE(std::string(precision_name(precision)) + " " + type + " " + std::to_string(channels));
        const Shape shape{2, channels, 9, 11};
        const auto c = static_cast<std::size_t>(channels);
        const std::vector<double> beta = uniform_values(c, 0.7, 1.3, rng);
        const std::vector<double> gamma = uniform_values(c * c, 0.1, 0.6, rng);
        const std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
        const std::vector<double> dy = uniform_values(x.size(), -1.0, 1.0, rng);
        const Pass with = run_pass(type, shape, Device::cuda(), DType::f32, precision, beta, gamma, x, dy);
        const Pass without = run_pass(type, shape, Device::cuda(), DType::f32, precision, beta, gamma, x, dy, false);
        EXPECT_EQ(with.beta_grad, without.beta_grad);
        EXPECT_EQ(with.gamma_grad, without.gamma_grad);
      }
}

TEST(GDN, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const std::string type : {"GDN", "IGDN"}) {
    // C = 3, 40, 128 (fused, C padded to 32/64/128), C = 130 (general path);
    // pixel counts that are and are not multiples of 4 and of the 64-pixel
    // tile; rank 2 and 3.
    for (Shape shape : {Shape{4, 3, 16, 16}, Shape{3, 40, 9, 7}, Shape{2, 128, 16, 12}, Shape{2, 128, 5, 5},
                        Shape{2, 130, 6, 6}, Shape{9, 130}, Shape{37, 5}, Shape{2, 6, 33}})
      EXPECT_TRUE(testing::outputs_match(check_parity(registry, type, {}, {shape}, spread_parity_options())));
  }
}

TEST(GDN, ParityCpuCudaAtInitialParameters) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const std::string type : {"GDN", "IGDN"})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, type, {}, {{2, 64, 8, 8}})));
}

// Gradients of beta_0 and gamma_01, both stored below their bounds, with
// dy = sign * x so that the sign of dL/dvalue is known.
struct BoundCase {
  std::vector<double> beta_grad, gamma_grad;
  std::vector<double> expected_beta_value_grad, expected_gamma_value_grad;  // dL/dvalue, naive
};

BoundCase run_bound_case(const std::string& type, double sign, Device device) {
  const Shape shape{2, 3, 2, 2};
  Image image(shape);
  std::mt19937_64 rng(21);
  std::vector<double> beta{1e-4, 1.1, 0.9};  // 1e-4 < bound_beta ~ 1e-3
  std::vector<double> gamma = uniform_values(9, 0.2, 0.5, rng);
  gamma[1] = 1e-7;  // gamma_01 < bound_gamma = 2^-18
  std::vector<double> x = uniform_values(static_cast<std::size_t>(shape_numel(shape)), 0.2, 1.0, rng);
  std::vector<double> dy(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) dy[e] = sign * x[e];

  auto layer = registry.create(type, "g", {});
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 unused(0);
  layer->initialize_parameters(DType::f64, device, unused);
  layer->parameter("beta").value = Tensor::from_values(beta, {3}, DType::f64, device);
  layer->parameter("gamma").value = Tensor::from_values(gamma, {3, 3}, DType::f64, device);
  Context ctx(device);
  Tensor input = Tensor::from_values(x, shape, DType::f64, device);
  Tensor output(shape, DType::f64, device);
  Tensor output_grad = Tensor::from_values(dy, shape, DType::f64, device);
  Tensor input_grad(shape, DType::f64, device);
  layer->forward(ctx, {&input}, {&output});
  layer->backward(ctx, {&input}, {&output}, {&output_grad}, {&input_grad});

  // The forward uses the bounds: beta_0 = beta_min, gamma_01 = 0.
  expect_near_relative(naive_forward(image, x, beta, gamma, type == "IGDN"), output.to_values(), 1e-12);

  BoundCase result;
  result.beta_grad = layer->parameter("beta").grad.to_values();
  result.gamma_grad = layer->parameter("gamma").grad.to_values();
  // dL/dn_i by the chain rule written out here, then summed.
  std::vector<double> norm = naive_norm(image, x, beta, gamma);
  result.expected_beta_value_grad.assign(3, 0.0);
  result.expected_gamma_value_grad.assign(9, 0.0);
  for (std::int64_t b = 0; b < image.images; ++b)
    for (std::int64_t p = 0; p < image.pixels; ++p)
      for (std::int64_t i = 0; i < 3; ++i) {
        std::size_t e = image.at(b, i, p);
        double q = type == "IGDN" ? 0.5 * dy[e] * x[e] / std::sqrt(norm[e])
                                  : -0.5 * dy[e] * x[e] / (norm[e] * std::sqrt(norm[e]));
        result.expected_beta_value_grad[static_cast<std::size_t>(i)] += q;
        for (std::int64_t k = 0; k < 3; ++k) {
          double v = x[image.at(b, k, p)];
          result.expected_gamma_value_grad[static_cast<std::size_t>(i * 3 + k)] += q * v * v;
        }
      }
  return result;
}

void check_lower_bound_gradients(const std::string& type, Device device) {
  // GDN: dy = x makes every q_i < 0 (dL/dvalue < 0: descent pushes the value
  // up, towards the bound), so the gradient passes; dy = -x blocks it.
  // IGDN has the opposite sign of q.
  for (double sign : {1.0, -1.0}) {
    SCOPED_TRACE(type + " with dy = " + (sign > 0 ? "x" : "-x") + " on " + device.str());
    BoundCase c = run_bound_case(type, sign, device);
    const bool pushes_up = c.expected_beta_value_grad[0] < 0.0;
    ASSERT_EQ(pushes_up, c.expected_gamma_value_grad[1] < 0.0);
    ASSERT_EQ(pushes_up, (type == "GDN") == (sign > 0));
    if (pushes_up) {
      EXPECT_NEAR(c.beta_grad[0], 2.0 * kBetaBound * c.expected_beta_value_grad[0], 1e-12);
      EXPECT_NEAR(c.gamma_grad[1], 2.0 * kGammaBound * c.expected_gamma_value_grad[1], 1e-15);
      EXPECT_LT(c.beta_grad[0], 0.0);
    } else {
      EXPECT_EQ(c.beta_grad[0], 0.0);
      EXPECT_EQ(c.gamma_grad[1], 0.0);
    }
    // Above their bounds the gradient always passes: 2 stored dL/dvalue.
    EXPECT_NEAR(c.beta_grad[1], 2.0 * 1.1 * c.expected_beta_value_grad[1], 1e-12);
    EXPECT_NE(c.beta_grad[1], 0.0);
  }
}

TEST(GDN, LowerBoundPassesGradientOnlyTowardsTheBound) {
  check_lower_bound_gradients("GDN", Device::cpu());
  check_lower_bound_gradients("IGDN", Device::cpu());
}

TEST(GDN, LowerBoundPassesGradientOnlyTowardsTheBoundCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  check_lower_bound_gradients("GDN", Device::cuda());
  check_lower_bound_gradients("IGDN", Device::cuda());
}

TEST(GDN, BackwardOverwritesInputGradientAndAccumulatesParameterGradients) {
  const Shape shape{2, 3, 2, 3};
  std::mt19937_64 rng(8);
  for (const std::string type : {"GDN", "IGDN"}) {
    auto layer = make_layer(type, shape);
    Context ctx;
    Tensor x = Tensor::from_values(uniform_values(18 * 2, -1.0, 1.0, rng), shape, DType::f64);
    Tensor y(shape, DType::f64);
    Tensor dy = Tensor::from_values(uniform_values(18 * 2, -1.0, 1.0, rng), shape, DType::f64);
    Tensor dx(shape, DType::f64);
    layer->forward(ctx, {&x}, {&y});
    layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
    std::vector<double> dx_once = dx.to_values();
    std::vector<double> beta_once = layer->parameter("beta").grad.to_values();
    std::vector<double> gamma_once = layer->parameter("gamma").grad.to_values();
    layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
    EXPECT_EQ(dx.to_values(), dx_once);
    std::vector<double> beta_twice = layer->parameter("beta").grad.to_values();
    for (std::size_t i = 0; i < beta_once.size(); ++i) EXPECT_NEAR(beta_twice[i], 2.0 * beta_once[i], 1e-14);
    // Without an input gradient the parameters still get theirs.
    layer->backward(ctx, {&x}, {&y}, {&dy}, {nullptr});
    std::vector<double> gamma_thrice = layer->parameter("gamma").grad.to_values();
    for (std::size_t i = 0; i < gamma_once.size(); ++i) EXPECT_NEAR(gamma_thrice[i], 3.0 * gamma_once[i], 1e-14);
  }
}

void expect_shape_error(const std::string& type, const std::vector<Shape>& inputs, const std::string& message) {
  auto layer = registry.create(type, "g", {});
  try {
    layer->output_shapes(inputs);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(GDN, RejectsRankBelowTwo) {
  expect_shape_error("GDN", {{5}},
                     "node 'g' (GDN): input [5] has rank 1; expected [N, C, ...] (rank >= 2, channels on axis 1)");
  expect_shape_error("IGDN", {{}}, "node 'g' (IGDN): input [] has rank 0;");
}

TEST(GDN, RejectsZeroChannelsAndTwoInputs) {
  expect_shape_error("GDN", {{2, 0, 3}}, "node 'g' (GDN): input [2, 0, 3] has no channels");
  expect_shape_error("GDN", {{2, 3}, {2, 3}}, "node 'g' (GDN): takes 1 input, got 2");
}

TEST(GDN, RejectsInputWithOtherChannelsThanItsParameters) {
  auto layer = make_layer("GDN", {1, 3, 2, 2});
  Context ctx;
  Tensor x({1, 4, 2, 2}, DType::f64);
  Tensor y({1, 4, 2, 2}, DType::f64);
  try {
    layer->forward(ctx, {&x}, {&y});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("input [1, 4, 2, 2] does not match the parameters, made for [N, 3, ...]"),
              std::string::npos)
        << e.what();
  }
}

void expect_config_error(const nlohmann::json& params, const std::string& message) {
  try {
    registry.create("GDN", "g", params);
    FAIL() << "expected a ConfigError for " << params.dump();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(GDN, RejectsBadParams) {
  expect_config_error({{"beta_min", 0.0}}, "node 'g' (GDN): parameter 'beta_min' must be a finite number > 0, got 0");
  expect_config_error({{"gamma_init", -0.5}}, "parameter 'gamma_init' must be a finite number >= 0, got -0.5");
  expect_config_error({{"reparam_offset", -1}}, "parameter 'reparam_offset' must be a finite number > 0, got -1");
  expect_config_error({{"beta_min", "small"}}, "parameter 'beta_min' must be a number");
}

}  // namespace
}  // namespace plexus

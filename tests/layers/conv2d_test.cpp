// Conv2d: forward against a naive direct convolution written here, gradient
// checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity including the chunked
// CUDA path, parameter layout and initialisation, bad params and shapes; the
// raster-scan masked convolution (mask "A", "B") the same ways and its causality.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "conv2d/conv2d.h"
#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm.h"
#include "convolution/implicit_gemm_tma_tiling.h"
#include "convolution/implicit_gemm_wgmma_weight_grad.h"
#include "convolution/nhwc_layout.h"
#include "convolution/weight_grad_layout.h"
#include "layers/tensor_core_reference.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

#if PLEXUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace plexus {
namespace {

using nlohmann::json;
namespace implicit_gemm = layers::implicit_gemm;
namespace few_channel_conv = layers::few_channel_conv;

const Registry registry = builtin_registry();

std::vector<double> random_vector(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

// The definition, one term at a time:
//   y[n, o, a, b] = bias[o] + sum_{c, i, j} W[o, c, i, j] x[n, c, a*s - p + i, b*s - p + j]
// with x = 0 outside the image.
std::vector<double> naive_conv2d(const std::vector<double>& x, const Shape& x_shape, const std::vector<double>& w,
                                 const std::vector<double>& bias, std::int64_t out, std::int64_t k, std::int64_t s,
                                 std::int64_t p, Shape& y_shape) {
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
  y_shape = {N, out, Ho, Wo};
  std::vector<double> y(static_cast<std::size_t>(N * out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t a = 0; a < Ho; ++a)
        for (std::int64_t b = 0; b < Wo; ++b) {
          double sum = bias.empty() ? 0.0 : bias[o];
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t row = a * s - p + i, col = b * s - p + j;
                if (row < 0 || row >= H || col < 0 || col >= W) continue;
                sum += w[((o * C + c) * k + i) * k + j] * x[((n * C + c) * H + row) * W + col];
              }
          y[((n * out + o) * Ho + a) * Wo + b] = sum;
        }
  return y;
}

// A layer built and initialised for `input_shape`.
std::unique_ptr<Layer> make_layer(const json& params, const Shape& input_shape, DType dtype, Device device,
                                  std::uint64_t seed = 5) {
  auto layer = registry.create("Conv2d", "c", params);
  layer->output_shapes({input_shape});
  layer->create_parameters({input_shape});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(dtype, device, rng);
  return layer;
}

struct Results {
  std::vector<double> output, input_grad;
  std::map<std::string, std::vector<double>> parameter_grads;
};

// Forward once, then backward `backward_calls` times with output gradient dy.
Results run(Layer& layer, Device device, DType dtype, const Shape& x_shape, const std::vector<double>& x_values,
            const std::vector<double>& dy_values, int backward_calls = 1) {
  Context ctx(device);
  Shape y_shape = layer.output_shapes({x_shape})[0];
  Tensor x = Tensor::from_values(x_values, x_shape, dtype, device);
  Tensor y(y_shape, dtype, device);
  Tensor dy = Tensor::from_values(dy_values, y_shape, dtype, device);
  Tensor dx(x_shape, dtype, device);
  for (Parameter* p : layer.parameters()) p->grad.fill_zero();
  layer.forward(ctx, {&x}, {&y});
  for (int call = 0; call < backward_calls; ++call) layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  ctx.synchronize();
  Results results{y.to_values(), dx.to_values(), {}};
  for (Parameter* p : layer.parameters()) results.parameter_grads[p->name] = p->grad.to_values();
  return results;
}

void expect_near_all(const std::vector<double>& expected, const std::vector<double>& actual, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(expected[i], actual[i], tolerance * std::max(1.0, std::abs(expected[i]))) << what << " [" << i << "]";
}

struct Case {
  json params;
  Shape input;
};

// Strides 1-3, padding 0-2, kernels 1/3/5, batch 1-2, H != W, with and without bias.
std::vector<Case> gradient_cases() {
  return {
      {{{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}, {2, 3, 5, 7}},
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"bias", false}}, {2, 2, 9, 6}},
      {{{"out_channels", 2}, {"kernel", 3}, {"stride", 3}}, {1, 3, 8, 10}},
      {{{"out_channels", 5}, {"kernel", 1}, {"stride", 2}}, {2, 3, 4, 5}},
      {{{"out_channels", 2}, {"kernel", 5}, {"padding", 2}, {"bias", false}}, {1, 2, 4, 3}},
      {{{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}, {2, 2, 7, 6}},
  };
}

TEST(Conv2d, ForwardMatchesNaiveConvolution) {
  std::mt19937_64 rng(17);
  for (const Case& c : gradient_cases()) {
    auto layer = make_layer(c.params, c.input, DType::f64, Device::cpu());
    const std::int64_t out = c.params["out_channels"], k = c.params["kernel"];
    const std::int64_t s = c.params.value("stride", 1), p = c.params.value("padding", 0);
    std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(c.input)), rng);
    std::vector<double> bias;
    if (c.params.value("bias", true)) bias = layer->parameter("bias").value.to_values();
    Shape expected_shape;
    std::vector<double> expected =
        naive_conv2d(x, c.input, layer->parameter("weight").value.to_values(), bias, out, k, s, p, expected_shape);
    ASSERT_EQ(layer->output_shapes({c.input})[0], expected_shape) << c.params.dump();
    Context ctx;
    Tensor input = Tensor::from_values(x, c.input, DType::f64);
    Tensor output(expected_shape, DType::f64);
    layer->forward(ctx, {&input}, {&output});
    expect_near_all(expected, output.to_values(), 1e-12, "Conv2d " + c.params.dump());
  }
}

TEST(Conv2d, HandComputedSmallCase) {
  // One channel, 3x3 image 1..9, 2x2 kernel of ones, stride 1, no padding:
  // each output is the sum of a 2x2 window, plus bias 0.5.
  auto layer = make_layer({{"out_channels", 1}, {"kernel", 2}}, {1, 1, 3, 3}, DType::f64, Device::cpu());
  layer->parameter("weight").value.copy_from(Tensor::from_values({1, 1, 1, 1}, {1, 1, 2, 2}, DType::f64));
  layer->parameter("bias").value.copy_from(Tensor::from_values({0.5}, {1}, DType::f64));
  Context ctx;
  Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, DType::f64);
  Tensor y({1, 1, 2, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{12.5, 16.5, 24.5, 28.5}));
}

TEST(Conv2d, ParametersUsePyTorchLayoutAndFanInBound) {
  auto layer = make_layer({{"out_channels", 8}, {"kernel", 3}}, {2, 5, 6, 6}, DType::f32, Device::cpu());
  ASSERT_EQ(layer->parameters().size(), 2u);
  EXPECT_EQ(layer->parameter("weight").shape, (Shape{8, 5, 3, 3}));
  EXPECT_EQ(layer->parameter("bias").shape, (Shape{8}));
  const double bound = 1.0 / std::sqrt(5.0 * 3 * 3);
  for (const char* name : {"weight", "bias"}) {
    double largest = 0.0;
    for (double v : layer->parameter(name).value.to_values()) largest = std::max(largest, std::abs(v));
    EXPECT_LE(largest, bound) << name;
    EXPECT_GT(largest, 0.5 * bound) << name << " looks initialised with a smaller bound";
  }
  auto no_bias =
      make_layer({{"out_channels", 8}, {"kernel", 3}, {"bias", false}}, {2, 5, 6, 6}, DType::f32, Device::cpu());
  ASSERT_EQ(no_bias->parameters().size(), 1u);
  EXPECT_EQ(no_bias->parameters()[0]->name, "weight");
}

TEST(Conv2d, GradientsCpu) {
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Conv2d", c.params, {c.input})));
}

TEST(Conv2d, BackwardOverwritesInputGradAndAccumulatesParameterGrads) {
  const json params = {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}};
  const Shape shape{2, 2, 5, 4};
  std::mt19937_64 rng(3);
  auto x = random_vector(static_cast<std::size_t>(shape_numel(shape)), rng);
  auto layer = make_layer(params, shape, DType::f64, Device::cpu());
  auto dy = random_vector(static_cast<std::size_t>(shape_numel(layer->output_shapes({shape})[0])), rng);
  Results once = run(*layer, Device::cpu(), DType::f64, shape, x, dy, 1);
  Results twice = run(*layer, Device::cpu(), DType::f64, shape, x, dy, 2);
  expect_near_all(once.input_grad, twice.input_grad, 1e-14, "input gradient");
  for (const auto& [name, grad] : once.parameter_grads) {
    std::vector<double> doubled = grad;
    for (double& v : doubled) v *= 2;
    expect_near_all(doubled, twice.parameter_grads.at(name), 1e-14, name);
  }
}

TEST(Conv2d, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Conv2d", c.params, {c.input}, Device::cuda())));
}

TEST(Conv2d, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // The autoencoder's analysis layers at reduced size, and the gradient cases.
  EXPECT_TRUE(testing::outputs_match(check_parity(
      registry, "Conv2d", {{"out_channels", 16}, {"kernel", 9}, {"stride", 4}, {"padding", 4}}, {{2, 3, 32, 32}})));
  EXPECT_TRUE(testing::outputs_match(check_parity(
      registry, "Conv2d", {{"out_channels", 16}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {{3, 16, 16, 12}})));
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Conv2d", c.params, {c.input})));
}

// ---- mask "A" / "B" ----

// Whether tap (i, j) of a k x k kernel is used under `mask`, by its definition
// (conv2d.h): "A" the taps before the centre in raster order, "B" the centre too.
bool tap_used(const std::string& mask, std::int64_t k, std::int64_t i, std::int64_t j) {
  const std::int64_t raster = i * k + j, centre = (k * k - 1) / 2;
  return mask == "A" ? raster < centre : raster <= centre;
}

std::vector<Case> masked_cases() {
  return {
      {{{"out_channels", 3}, {"kernel", 5}, {"padding", 2}, {"mask", "A"}}, {2, 2, 5, 6}},
      {{{"out_channels", 2}, {"kernel", 3}, {"padding", 1}, {"mask", "B"}, {"bias", false}}, {1, 3, 4, 4}},
      {{{"out_channels", 4}, {"kernel", 3}, {"padding", 1}, {"mask", "A"}, {"groups", 2}}, {1, 4, 3, 5}},
  };
}

// The masked forward is the naive convolution of the weights zeroed where the
// mask says by hand; weights loaded at masked taps never enter, and forward
// leaves them 0.
TEST(Conv2d, MaskedForwardMatchesNaiveConvolutionOfMaskedWeights) {
  std::mt19937_64 rng(29);
  for (const std::string mask : {"A", "B"}) {
    const json params = {{"out_channels", 3}, {"kernel", 5}, {"padding", 2}, {"mask", mask}};
    const Shape shape{2, 2, 6, 5};
    auto layer = make_layer(params, shape, DType::f64, Device::cpu());
    std::vector<double> w = random_vector(3 * 2 * 25, rng);  // every tap non-zero, the masked ones too
    layer->parameter("weight").value.copy_from(Tensor::from_values(w, {3, 2, 5, 5}, DType::f64));
    std::vector<double> masked_w = w;
    for (std::size_t n = 0; n < w.size(); ++n)
      if (!tap_used(mask, 5, static_cast<std::int64_t>(n % 25) / 5, static_cast<std::int64_t>(n % 5))) masked_w[n] = 0;
    const std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(shape)), rng);
    Shape y_shape;
    const std::vector<double> expected =
        naive_conv2d(x, shape, masked_w, layer->parameter("bias").value.to_values(), 3, 5, 1, 2, y_shape);
    Context ctx;
    Tensor input = Tensor::from_values(x, shape, DType::f64);
    Tensor output(y_shape, DType::f64);
    layer->forward(ctx, {&input}, {&output});
    expect_near_all(expected, output.to_values(), 1e-12, "masked " + mask);
    EXPECT_EQ(layer->parameter("weight").value.to_values(), masked_w) << mask;
  }
}

// Mask "A": the output at (a, b) does not change when the input changes at
// (a, b) or any later position in raster order; under "B" it does at (a, b).
TEST(Conv2d, MaskAOutputReadsOnlyEarlierPositions) {
  const Shape shape{1, 2, 5, 5};
  std::mt19937_64 rng(31);
  const std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(shape)), rng);
  for (const std::string mask : {"A", "B"}) {
    auto layer = make_layer({{"out_channels", 2}, {"kernel", 5}, {"padding", 2}, {"mask", mask}}, shape, DType::f64,
                            Device::cpu());
    Context ctx;
    auto forward = [&](const std::vector<double>& values) {
      Tensor input = Tensor::from_values(values, shape, DType::f64);
      Tensor output({1, 2, 5, 5}, DType::f64);
      layer->forward(ctx, {&input}, {&output});
      return output.to_values();
    };
    const std::vector<double> base = forward(x);
    for (std::int64_t changed = 0; changed < 25; ++changed) {
      std::vector<double> moved = x;
      moved[static_cast<std::size_t>(changed)] += 1.0;  // channel 0 at raster position `changed`
      const std::vector<double> y = forward(moved);
      for (std::int64_t position = 0; position < 25; ++position) {
        const bool reads = position > changed || (mask == "B" && position == changed);
        bool differs = false;
        for (std::int64_t o = 0; o < 2; ++o)
          differs = differs ||
                    y[static_cast<std::size_t>(o * 25 + position)] != base[static_cast<std::size_t>(o * 25 + position)];
        if (!reads) EXPECT_FALSE(differs) << mask << ": input at " << changed << " reached output " << position;
        if (position == changed && mask == "B") EXPECT_TRUE(differs) << "mask B reads the centre";
      }
    }
  }
}

TEST(Conv2d, MaskedGradientsCpu) {
  for (const Case& c : masked_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Conv2d", c.params, {c.input})));
}

// The masked taps' gradient is 0 (an optimiser never moves them), the others' not.
TEST(Conv2d, MaskedWeightGradientIsZeroAtMaskedTaps) {
  const json params = {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}, {"mask", "A"}};
  const Shape shape{2, 2, 4, 5};
  std::mt19937_64 rng(37);
  auto layer = make_layer(params, shape, DType::f64, Device::cpu());
  const auto x = random_vector(static_cast<std::size_t>(shape_numel(shape)), rng);
  const auto dy = random_vector(static_cast<std::size_t>(shape_numel(layer->output_shapes({shape})[0])), rng);
  const Results results = run(*layer, Device::cpu(), DType::f64, shape, x, dy);
  const std::vector<double>& grad = results.parameter_grads.at("weight");
  for (std::size_t n = 0; n < grad.size(); ++n) {
    if (tap_used("A", 3, static_cast<std::int64_t>(n % 9) / 3, static_cast<std::int64_t>(n % 3)))
      EXPECT_NE(grad[n], 0.0) << n;
    else EXPECT_EQ(grad[n], 0.0) << n;
  }
}

TEST(Conv2d, MaskedGradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : masked_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Conv2d", c.params, {c.input}, Device::cuda())));
}

TEST(Conv2d, MaskedParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(
      registry, "Conv2d", {{"out_channels", 24}, {"kernel", 5}, {"padding", 2}, {"mask", "A"}}, {{2, 12, 16, 12}})));
  for (const Case& c : masked_cases())
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Conv2d", c.params, {c.input})));
}

TEST(Conv2d, ChunkedCudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // A scratch limit of two and a half images splits a batch of 5 into chunks 2, 2, 1.
  const json params = {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}};
  const Shape shape{5, 3, 9, 8};
  auto cpu = make_layer(params, shape, DType::f64, Device::cpu());
  auto gpu = make_layer(params, shape, DType::f64, Device::cuda());
  for (Parameter* p : cpu->parameters()) gpu->parameter(p->name).value.copy_from(p->value);
  // Per image: columns [C*k*k, Ho*Wo] and a weight gradient [out, C*k*k].
  const std::size_t image_scratch_bytes = (27 * (5 * 4) + 4 * 27) * sizeof(double);
  auto* conv = dynamic_cast<layers::Conv2d*>(gpu.get());
  ASSERT_NE(conv, nullptr);
  conv->set_scratch_limit(2 * image_scratch_bytes + image_scratch_bytes / 2);
  std::mt19937_64 rng(8);
  auto x = random_vector(static_cast<std::size_t>(shape_numel(shape)), rng);
  auto dy = random_vector(static_cast<std::size_t>(shape_numel(cpu->output_shapes({shape})[0])), rng);
  // Two backward calls: parameter gradients must accumulate across calls on the GPU too.
  Results expected = run(*cpu, Device::cpu(), DType::f64, shape, x, dy, 2);
  Results actual = run(*gpu, Device::cuda(), DType::f64, shape, x, dy, 2);
  expect_near_all(expected.output, actual.output, 1e-12, "output");
  expect_near_all(expected.input_grad, actual.input_grad, 1e-12, "input gradient");
  for (const auto& [name, grad] : expected.parameter_grads)
    expect_near_all(grad, actual.parameter_grads.at(name), 1e-12, name + " gradient");
}

// Shapes the tensor-core engine must get right: batch 1, odd sizes, channels
// not a multiple of 8, 3 input channels, more than one 128-row tile, 1x1
// stride 2 (backward_data phases without taps), even kernels, stride 3 and 4,
// split K (small images, long K), tap-major K (>= 32 source channels, not a
// multiple of 32: 33 to 192, gathered from the zero-padded NHWC copy; at
// strides 1 to 4, batch 1, and 128-pixel tiles spanning several images), the
// weight gradient's tap-major K read from NHWC (128 and 256 input channels:
// stride 1 and 2, a stage straddling images and the end of the pixels, 16x16
// images where every tile of Y is whole and the pixel sum is split; 19x23
// images, 3 of them, whose pixel sum splits mid-image at 32 and at 64 pixels
// per stage), the
// passes with <= 16 rows that go to im2col + cuBLAS next to the engine's (3
// and 5 output channels), and input gradients onto 1 to 4 channels, which
// few_channel_conv::backward_data runs (the 3->128 5x5/2 layer that starts
// an analysis transform, 4 channels at stride 3, 1 channel at stride 1,
// 130 and 40 output channels: K not a whole stage of 32).
std::vector<Case> tensor_core_cases() {
  return {
      {{{"out_channels", 128}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 3, 17, 15}},
      {{{"out_channels", 130}, {"kernel", 3}, {"stride", 3}, {"padding", 1}}, {1, 4, 10, 11}},
      {{{"out_channels", 40}, {"kernel", 5}, {"padding", 2}}, {2, 1, 9, 8}},
      {{{"out_channels", 5}, {"kernel", 3}, {"padding", 1}}, {1, 3, 7, 9}},
      {{{"out_channels", 19}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 18, 11, 8}},
      {{{"out_channels", 17}, {"kernel", 4}, {"stride", 3}, {"bias", false}}, {3, 17, 13, 14}},
      {{{"out_channels", 130}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 20, 9, 10}},
      {{{"out_channels", 18}, {"kernel", 1}, {"stride", 2}}, {2, 21, 5, 6}},
      {{{"out_channels", 24}, {"kernel", 9}, {"stride", 4}, {"padding", 4}}, {2, 3, 19, 21}},
      {{{"out_channels", 3}, {"kernel", 3}}, {1, 37, 6, 5}},
      {{{"out_channels", 32}, {"kernel", 5}, {"padding", 2}}, {3, 40, 12, 12}},
      {{{"out_channels", 20}, {"kernel", 5}, {"stride", 4}, {"padding", 1}}, {2, 19, 17, 9}},
      {{{"out_channels", 36}, {"kernel", 5}, {"stride", 3}, {"padding", 2}}, {2, 18, 10, 11}},
      {{{"out_channels", 20}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}, {2, 128, 7, 6}},
      {{{"out_channels", 20}, {"kernel", 3}, {"padding", 1}}, {2, 128, 16, 16}},
      {{{"out_channels", 24}, {"kernel", 3}, {"padding", 1}, {"bias", false}}, {1, 256, 9, 7}},
      {{{"out_channels", 20}, {"kernel", 3}, {"padding", 1}}, {3, 128, 19, 23}},
      {{{"out_channels", 33}, {"kernel", 3}, {"stride", 3}, {"padding", 1}}, {1, 45, 13, 11}},
      {{{"out_channels", 50}, {"kernel", 4}, {"stride", 4}, {"padding", 1}}, {1, 33, 23, 17}},
      {{{"out_channels", 34}, {"kernel", 3}, {"padding", 1}}, {5, 35, 5, 7}},
      // Source channels 48, 128, 192 (one, two and three 64-channel bf16
      // stages per tap on Hopper's wgmma path) in both directions; 192 rows
      // = one whole and one partial 128-row tile.
      {{{"out_channels", 192}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}, {2, 48, 9, 11}},
      {{{"out_channels", 128}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {1, 192, 12, 10}},
      {{{"out_channels", 48}, {"kernel", 3}, {"padding", 1}}, {1, 128, 10, 12}},
      // Output rows of whole 32- and 64-pixel tiles with >= 64 channels both
      // sides: the Hopper weight gradient (TMA boxes of stride phases) at
      // strides 1, 2, 3, odd heights (phases of unequal size), 96 channels
      // (a partial channel tile), 130 output channels (a partial row tile),
      // rows of 32 and 96 pixels, which BF16 takes two rows per 64-pixel
      // tile (3 rows: the last tile's second row is past the bottom), and 65
      // channels both sides (odd rows of partial sums; 65 x 65 (o, c) pairs,
      // not a whole number of the split sum's blocks).
      {{{"out_channels", 72}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 64, 127, 128}},
      {{{"out_channels", 64}, {"kernel", 3}, {"padding", 1}, {"bias", false}}, {1, 96, 5, 64}},
      {{{"out_channels", 130}, {"kernel", 5}, {"stride", 3}, {"padding", 2}}, {1, 64, 10, 190}},
      {{{"out_channels", 64}, {"kernel", 4}, {"stride", 2}, {"padding", 1}}, {2, 128, 7, 64}},
      {{{"out_channels", 64}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}, {1, 64, 6, 192}},
      {{{"out_channels", 65}, {"kernel", 3}, {"padding", 1}}, {2, 65, 4, 32}},
      // BF16 rows of 16 and 48 pixels: four rows per 64-pixel tile (32-byte
      // sub-tiles), with 5 rows (the second tile holds one real row), 6 rows
      // of three tiles each with 96 channels, and 192 output channels from
      // 128 (as onto a 32x32 image, a partial row tile).
      {{{"out_channels", 72}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 64, 9, 32}},
      {{{"out_channels", 64}, {"kernel", 3}, {"padding", 1}}, {1, 96, 6, 48}},
      {{{"out_channels", 192}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 128, 8, 32}},
      // 1 to 4 input channels (the layer reading an RGB image): forward and
      // the weight gradient from staged image strips (few_channel_conv.h), at
      // strides 1 to 4, kernels 3 to 9 (243 columns of the weight gradient),
      // rows of several 64-pixel tiles with a partial last one, odd and even
      // output widths, 17 to 130 output channels (partial 64-row tiles).
      {{{"out_channels", 128}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 3, 13, 70}},
      {{{"out_channels", 40}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"bias", false}}, {1, 1, 9, 130}},
      {{{"out_channels", 130}, {"kernel", 9}, {"stride", 4}, {"padding", 4}}, {2, 3, 18, 17}},
      {{{"out_channels", 24}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 4, 9, 11}},
      {{{"out_channels", 17}, {"kernel", 3}, {"padding", 1}}, {3, 2, 5, 66}},
      {{{"out_channels", 64}, {"kernel", 4}, {"stride", 3}, {"padding", 1}}, {1, 3, 11, 200}},
  };
}

implicit_gemm::ConvProblem conv_problem(const Case& c) {
  auto layer = registry.create("Conv2d", "c", c.params);
  const Shape y = layer->output_shapes({c.input})[0];
  implicit_gemm::ConvProblem problem;
  problem.batch = c.input[0];
  problem.in_channels = c.input[1];
  problem.height = c.input[2];
  problem.width = c.input[3];
  problem.out_channels = y[1];
  problem.out_height = y[2];
  problem.out_width = y[3];
  problem.kernel = c.params["kernel"];
  problem.stride = c.params.value("stride", 1);
  problem.padding = c.params.value("padding", 0);
  return problem;
}

// The TMA-fed gather's rectangles of destination points: as wide as the
// grid (up to 128), then as tall, then several images; declined where a
// box would pass the TMA's 256 elements along a dimension (the tile times
// the source's stride) or more than an eighth of the columns would lie past
// the grids and the batch.
TEST(Conv2d, TmaGatherTilesGridsWithRectangles) {
  using implicit_gemm::detail::GridSize;
  using implicit_gemm::detail::tma_gather_tiling;
  using implicit_gemm::detail::TmaTiling;
  // The tiling of `parts` grids, as {tile_w, tile_h, tile_n, tiles_w, tiles_h, rectangles}.
  const auto tiling = [](int batch, int scale, const GridSize* grids, int parts) {
    TmaTiling t;
    EXPECT_TRUE(tma_gather_tiling(batch, scale, grids, parts, t)) << grids[0].h << "x" << grids[0].w;
    return std::vector<long long>{t.tile_w, t.tile_h, t.tile_n, t.tiles_w, t.tiles_h, t.rectangles};
  };
  // 5x5/2 onto 128x128, batch 16: 64x64 outputs, two rows of 64 a block.
  const GridSize grid64{64, 64};
  EXPECT_EQ(tiling(16, 2, &grid64, 1), (std::vector<long long>{64, 2, 1, 1, 32, 16 * 32}));
  // Rows of 256 points: two rectangles of one row across each.
  const GridSize wide{8, 256};
  EXPECT_EQ(tiling(2, 1, &wide, 1), (std::vector<long long>{128, 1, 1, 2, 8, 2 * 8 * 2}));
  // 4x4 grids: eight images a block.
  const GridSize grid4{4, 4};
  EXPECT_EQ(tiling(16, 2, &grid4, 1), (std::vector<long long>{4, 4, 8, 1, 1, 2}));
  // The four phases of a stride-2 transpose onto 128x128.
  const GridSize phases[4] = {grid64, grid64, grid64, grid64};
  EXPECT_EQ(tiling(16, 1, phases, 4), (std::vector<long long>{64, 2, 1, 1, 32, 16 * 32}));
  TmaTiling t;
  // Stride 2 onto rows of 128 outputs: boxes of 256 columns; stride 4: 512.
  const GridSize rows128{8, 128};
  EXPECT_TRUE(tma_gather_tiling(1, 2, &rows128, 1, t));
  EXPECT_FALSE(tma_gather_tiling(1, 4, &rows128, 1, t));
  // 17x17 grids in 32x4 rectangles (more than half wasted); 3 images of 4x4
  // in one rectangle of 8; no parts, or more than a stride of 4 has.
  const GridSize grid17{17, 17};
  EXPECT_FALSE(tma_gather_tiling(16, 1, &grid17, 1, t));
  EXPECT_FALSE(tma_gather_tiling(3, 2, &grid4, 1, t));
  EXPECT_FALSE(tma_gather_tiling(16, 2, &grid64, 0, t));
  const GridSize many[17] = {};
  EXPECT_FALSE(tma_gather_tiling(16, 1, many, 17, t));
}

// The few-channel kernels take the layers next to RGB images (1 to 4 input
// channels, kernels up to 9) and leave the rest to the engine's gather.
TEST(Conv2d, FewChannelKernelsTakeOnlyImageSideLayers) {
  implicit_gemm::ConvProblem rgb;
  rgb.batch = 16;
  rgb.in_channels = 3;
  rgb.height = rgb.width = 256;
  rgb.out_channels = 128;
  rgb.out_height = rgb.out_width = 128;
  rgb.kernel = 5;
  rgb.stride = 2;
  rgb.padding = 2;
  EXPECT_TRUE(few_channel_conv::takes_forward(rgb));
  EXPECT_TRUE(few_channel_conv::takes_backward_weight(rgb));
  implicit_gemm::ConvProblem wide = rgb;
  wide.in_channels = 5;
  EXPECT_FALSE(few_channel_conv::takes_forward(wide));
  EXPECT_FALSE(few_channel_conv::takes_backward_weight(wide));
  implicit_gemm::ConvProblem large_kernel = rgb;
  large_kernel.kernel = 11;
  EXPECT_FALSE(few_channel_conv::takes_forward(large_kernel));
  EXPECT_FALSE(few_channel_conv::takes_backward_weight(large_kernel));
  implicit_gemm::ConvProblem bls_rgb = rgb;  // bls2017's first layer: 3 channels, 9x9 (243 taps)
  bls_rgb.kernel = 9;
  bls_rgb.stride = 4;
  EXPECT_TRUE(few_channel_conv::takes_forward(bls_rgb));
  implicit_gemm::ConvProblem too_many_taps = bls_rgb;  // 4 channels at 9x9: 324 taps
  too_many_taps.in_channels = 4;
  EXPECT_FALSE(few_channel_conv::takes_forward(too_many_taps));
  EXPECT_FALSE(few_channel_conv::takes_backward_weight(too_many_taps));
}

#if PLEXUS_WITH_CUDA
// Which weight gradients the Hopper kernel takes, by output row width: at
// bf16 whole 16-pixel tiles (a 64-pixel K tile of 1, 2 or 4 rows), at TF32
// whole 32-pixel tiles; narrower or ragged rows, fewer than 64 channels or
// a stride above 4 stay on mma.sync. Host logic: runs without a GPU.
TEST(Conv2d, HopperWeightGradientTakesWholeRowTiles) {
  implicit_gemm::ConvProblem p;
  p.batch = 16;
  p.in_channels = 128;
  p.out_channels = 192;
  p.kernel = 5;
  p.stride = 2;
  p.padding = 2;
  const auto fits = [&](long long out_width, bool bf16) {
    p.width = 2 * out_width;
    p.height = 2 * out_width;
    p.out_width = out_width;
    p.out_height = out_width;
    return implicit_gemm::detail::wgmma_weight_grad_fits(p, bf16);
  };
  for (const long long width : {16, 32, 48, 64, 80, 128}) EXPECT_TRUE(fits(width, true)) << width << " bf16";
  for (const long long width : {8, 24, 40, 4}) EXPECT_FALSE(fits(width, true)) << width << " bf16";
  for (const long long width : {32, 64, 96}) EXPECT_TRUE(fits(width, false)) << width << " tf32";
  for (const long long width : {16, 48, 8}) EXPECT_FALSE(fits(width, false)) << width << " tf32";
  ASSERT_TRUE(fits(16, true));  // a problem that fits, then one thing changed at a time
  p.in_channels = 48;
  EXPECT_FALSE(implicit_gemm::detail::wgmma_weight_grad_fits(p, true)) << "48 input channels";
  p.in_channels = 128;
  p.stride = 5;
  EXPECT_FALSE(implicit_gemm::detail::wgmma_weight_grad_fits(p, true)) << "stride 5";
}
#endif

TEST(Conv2d, TensorCoreEngineTakesOnlyTf32OrBf16F32Cuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const implicit_gemm::ConvProblem problem = conv_problem(tensor_core_cases()[4]);
  Context strict(Device::cuda());
  EXPECT_FALSE(implicit_gemm::supports(strict, DType::f32, problem)) << "strict f32 must keep the exact path";
  Context tf32(Device::cuda());
  tf32.set_allow_tf32(true);
  EXPECT_TRUE(implicit_gemm::supports(tf32, DType::f32, problem));
  EXPECT_FALSE(implicit_gemm::supports(tf32, DType::f64, problem));
  Context bf16(Device::cuda());
  bf16.set_precision(Precision::bf16);
  EXPECT_TRUE(implicit_gemm::supports(bf16, DType::f32, problem));
  Context cpu;
  cpu.set_allow_tf32(true);
  EXPECT_FALSE(implicit_gemm::supports(cpu, DType::f32, problem));
}

#if PLEXUS_WITH_CUDA
// Which kernels the tap-major passes run: on a compute capability 9.0 GPU
// the wgmma ones (the build must include architecture 90, as native does on
// a Hopper), unless PLEXUS_CONV_WGMMA=0 asks for the mma.sync ones; on any
// other GPU mma.sync. The tensor-core tests below then cover that path.
TEST(Conv2d, TensorCoreEngineUsesWgmmaExactlyOnHopperCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  const bool expected = major == 9 && minor == 0 && ctx.kernel_settings().conv_wgmma;
  std::cout << "compute capability " << major << "." << minor << ": tap-major passes run "
            << (implicit_gemm::uses_wgmma(ctx) ? "wgmma" : "mma.sync") << "\n";
  EXPECT_EQ(implicit_gemm::uses_wgmma(ctx), expected);
}
#endif

TEST(Conv2d, TensorCoreCudaMatchesF64Reference) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context tf32(Device::cuda());
  tf32.set_allow_tf32(true);
  std::uint64_t seed = 100;
  for (const Case& c : tensor_core_cases()) {
    ASSERT_TRUE(implicit_gemm::supports(tf32, DType::f32, conv_problem(c))) << c.params.dump();
    const testing::TensorCoreErrors errors =
        testing::tensor_core_errors(registry, "Conv2d", c.params, c.input, seed++, Precision::tf32);
    testing::expect_within(errors, testing::kTf32Tolerance, c.params.dump() + " on " + shape_str(c.input));
  }
}

// The same cases with BF16 products: within the bf16 tolerance, and visibly
// rounded to bf16 (so the test fails if bf16 silently ran as TF32).
TEST(Conv2d, TensorCoreBf16CudaMatchesF64Reference) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::uint64_t seed = 100;
  for (const Case& c : tensor_core_cases()) {
    const std::string what = c.params.dump() + " on " + shape_str(c.input);
    const testing::TensorCoreErrors bf16 =
        testing::tensor_core_errors(registry, "Conv2d", c.params, c.input, seed, Precision::bf16);
    const testing::TensorCoreErrors tf32 =
        testing::tensor_core_errors(registry, "Conv2d", c.params, c.input, seed++, Precision::tf32);
    testing::expect_within(bf16, testing::kBf16Tolerance, what);
    testing::expect_bf16_rounding_shows(bf16, tf32, what);
    std::cout << what << "\n  bf16: " << testing::describe(bf16) << "\n  tf32: " << testing::describe(tf32) << "\n";
  }
}

#if PLEXUS_WITH_CUDA
// The engine's NHWC copy against the definition, element by element, with
// channels padded with zeros (and the destination poisoned first, so an
// unwritten element shows), on sizes that are not multiples of its tiles.
// bf16 of an f32 by its bits, nearest even (the values here are finite):
// keep the high 16 bits after adding 0x7fff plus the lowest kept bit.
float round_to_bf16(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  bits = ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

// Bit patterns of a bf16 device buffer as floats (exact).
std::vector<double> bf16_values(const std::vector<std::uint16_t>& halves) {
  std::vector<double> values;
  for (const std::uint16_t half : halves) {
    const std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
    float value = 0.0f;
    std::memcpy(&value, &bits, sizeof value);
    values.push_back(value);
  }
  return values;
}

// The source of the size checks below, which fail before reading it (the
// copies take f32 or bf16 sources, so a plain nullptr would not say which).
const float* const no_source = nullptr;

// Runs copy(destination) on a NaN-poisoned device buffer of `count`
// elements (f32, or bf16 bit patterns) and returns its values.
template <class Copy>
std::vector<double> poisoned_copy(bool bf16, std::int64_t count, Copy&& copy) {
  if (!bf16) {
    Tensor y = Tensor::from_values(std::vector<double>(static_cast<std::size_t>(count), std::nan("")), {count},
                                   DType::f32, Device::cuda());
    copy(y.data<float>(), static_cast<std::uint16_t*>(nullptr));
    return y.to_values();
  }
  std::vector<std::uint16_t> host(static_cast<std::size_t>(count), 0xffff);  // bf16 NaN: the poison
  std::uint16_t* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(std::uint16_t)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice), cudaSuccess);
  copy(static_cast<float*>(nullptr), device);
  EXPECT_EQ(cudaMemcpy(host.data(), device, host.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  return bf16_values(host);
}

// A copy's source on CUDA: `values` at `shape`, in bf16 when bf16_source
// (the values rounded to bf16 first, in place, so both dtypes hold them exactly).
Tensor copy_source(std::vector<double>& values, const Shape& shape, bool bf16_source) {
  if (bf16_source)
    for (double& value : values) value = round_to_bf16(static_cast<float>(value));
  return Tensor::from_values(values, shape, bf16_source ? DType::bf16 : DType::f32, Device::cuda());
}

// poisoned_copy with the source's elements (f32 or bf16, as stored) handed
// to copy(elements, f32 destination, bf16 destination).
template <class Copy>
std::vector<double> poisoned_copy_from(const Tensor& source, bool bf16, std::int64_t count, Copy&& copy) {
  return poisoned_copy(bf16, count, [&](float* f, std::uint16_t* h) {
    if (source.dtype() == DType::bf16) copy(source.data<BFloat16>(), f, h);
    else copy(source.data<float>(), f, h);
  });
}

// The weight gradient's row-shifted copies of Y (f32 or bf16, from an f32
// or a bf16 source) against their definition (weight_grad_layout.h), every
// element of a poisoned destination. From bf16 into bf16 the copy moves
// 8-byte words where widths and pitches are multiples of 4 (shifts reaching
// before the row's start and past its end, 4 copies of 3 shifted right),
// element by element otherwise (width 9, pitch 13).
TEST(Conv2d, ShiftedRowsCopyMatchesDefinitionCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  std::mt19937_64 rng(13);
  struct Sizes {
    std::int64_t batch, channels, height, width;
    int first_shift, copies;
    std::int64_t pitch;
  };
  for (const bool bf16_source : {false, true})
    for (const bool bf16 : {false, true})
      for (const Sizes s : {Sizes{1, 1, 1, 4, 0, 1, 8}, Sizes{2, 3, 5, 32, -1, 3, 32}, Sizes{1, 2, 3, 20, -2, 4, 24},
                            Sizes{2, 2, 2, 64, 1, 2, 64}, Sizes{1, 1, 2, 9, -1, 2, 13}, Sizes{1, 2, 3, 16, 3, 4, 20}}) {
        std::vector<double> source =
            random_vector(static_cast<std::size_t>(s.batch * s.channels * s.height * s.width), rng);
        const Tensor y = copy_source(source, {s.batch, s.channels, s.height, s.width}, bf16_source);
        const std::int64_t rows = s.batch * s.channels * s.height;
        const std::vector<double> actual = poisoned_copy_from(
            y, bf16, s.copies * rows * s.pitch, [&](const auto* elements, float* f, std::uint16_t* h) {
              if (bf16)
                layers::shifted_rows_bf16_cuda(ctx, elements, s.batch, s.channels, s.height, s.width, s.first_shift,
                                               s.copies, s.pitch, h);
              else
                layers::shifted_rows_cuda(ctx, elements, s.batch, s.channels, s.height, s.width, s.first_shift,
                                          s.copies, s.pitch, f);
            });
        std::int64_t wrong = 0, index = 0;
        for (int c = 0; c < s.copies; ++c)
          for (std::int64_t row = 0; row < rows; ++row)
            for (std::int64_t u = 0; u < s.pitch; ++u, ++index) {
              const std::int64_t w = u - s.first_shift - c;
              const float value_f32 = w >= 0 && w < s.width
                                          ? static_cast<float>(source[static_cast<std::size_t>(row * s.width + w)])
                                          : 0.0f;
              const double expected = bf16 ? round_to_bf16(value_f32) : value_f32;
              if (!(actual[static_cast<std::size_t>(index)] == expected)) ++wrong;
            }
        EXPECT_EQ(wrong, 0) << (bf16_source ? "bf16" : "f32") << " source, " << (bf16 ? "bf16" : "f32")
                            << " copy: rows " << rows << ", width " << s.width << ", shift " << s.first_shift << " x "
                            << s.copies << ", pitch " << s.pitch;
      }
  testing::expect_error<Error>([&] { layers::shifted_rows_cuda(ctx, no_source, 1, 1, 1, 4, 0, 0, 8, nullptr); },
                               {"shifted_rows", "copies 0"});
}

// The weight gradient's stride-phase copy of X (f32 or bf16, from an f32 or
// a bf16 source) against its definition (weight_grad_layout.h), every
// element of a NaN-poisoned destination, padding included. Stride 2 from
// bf16 into bf16 copies 16-byte chunks where the width is a multiple of 8
// and the pitch of 4 (7x16 with an odd height, 5x32 into a wider pitch),
// element by element otherwise (pitch 10, width 17).
TEST(Conv2d, PhaseCopyMatchesDefinitionCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  std::mt19937_64 rng(11);
  struct Sizes {
    std::int64_t batch, channels, height, width;
    int stride;
    std::int64_t pitch;
  };
  for (const bool bf16_source : {false, true})
    for (const bool bf16 : {false, true})
      for (const Sizes s : {Sizes{1, 1, 1, 1, 1, 8}, Sizes{2, 3, 7, 9, 2, 8}, Sizes{1, 5, 10, 13, 3, 16},
                            Sizes{2, 2, 9, 64, 4, 24}, Sizes{1, 4, 6, 64, 1, 64}, Sizes{1, 2, 5, 17, 2, 10},
                            Sizes{2, 3, 7, 16, 2, 8}, Sizes{1, 2, 5, 32, 2, 20}, Sizes{1, 2, 4, 16, 2, 10}}) {
        std::vector<double> source =
            random_vector(static_cast<std::size_t>(s.batch * s.channels * s.height * s.width), rng);
        const Tensor x = copy_source(source, {s.batch, s.channels, s.height, s.width}, bf16_source);
        const std::int64_t phase_height = (s.height + s.stride - 1) / s.stride;
        const std::int64_t count = std::int64_t{s.stride} * s.stride * s.batch * s.channels * phase_height * s.pitch;
        const std::vector<double> actual =
            poisoned_copy_from(x, bf16, count, [&](const auto* elements, float* f, std::uint16_t* h) {
              if (bf16)
                layers::nchw_to_phases_bf16_cuda(ctx, elements, s.batch, s.channels, s.height, s.width, s.stride,
                                                 s.pitch, h);
              else
                layers::nchw_to_phases_cuda(ctx, elements, s.batch, s.channels, s.height, s.width, s.stride, s.pitch,
                                            f);
            });
        std::int64_t wrong = 0, index = 0;
        for (int a = 0; a < s.stride; ++a)
          for (int b = 0; b < s.stride; ++b)
            for (std::int64_t n = 0; n < s.batch; ++n)
              for (std::int64_t c = 0; c < s.channels; ++c)
                for (std::int64_t hp = 0; hp < phase_height; ++hp)
                  for (std::int64_t wp = 0; wp < s.pitch; ++wp, ++index) {
                    const std::int64_t h = s.stride * hp + a, w = s.stride * wp + b;
                    const float value_f32 =
                        h < s.height && w < s.width
                            ? static_cast<float>(
                                  source[static_cast<std::size_t>(((n * s.channels + c) * s.height + h) * s.width + w)])
                            : 0.0f;
                    const double expected = bf16 ? round_to_bf16(value_f32) : value_f32;
                    if (!(actual[static_cast<std::size_t>(index)] == expected)) ++wrong;
                  }
        EXPECT_EQ(wrong, 0) << (bf16_source ? "bf16" : "f32") << " source, " << (bf16 ? "bf16" : "f32")
                            << " copy: batch " << s.batch << ", channels " << s.channels << ", " << s.height << "x"
                            << s.width << ", stride " << s.stride << ", pitch " << s.pitch;
      }
  testing::expect_error<Error>([&] { layers::nchw_to_phases_cuda(ctx, no_source, 1, 1, 4, 9, 2, 4, nullptr); },
                               {"nchw_to_phases", "width 9", "stride 2", "row_pitch 4"});  // pitch < ceil(9/2)
  testing::expect_error<Error>([&] { layers::nchw_to_phases_cuda(ctx, no_source, 1, 1, 4, 9, 5, 8, nullptr); },
                               {"nchw_to_phases", "stride 5"});
}

// The NHWC copy (f32 or bf16, from an f32 or a bf16 source) against its
// definition, every element of a NaN-poisoned destination, channel padding
// included: bf16 with an even channel stride stores channel pairs (64-channel
// tiles, the last one partial at 96), an odd stride one channel at a time; a
// bf16 source with an even plane is read as pixel pairs (64-pixel tiles, the
// last one partial at 70 and 130).
TEST(Conv2d, NchwToNhwcCopyMatchesDefinitionCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  std::mt19937_64 rng(7);
  struct Sizes {
    std::int64_t batch, channels, plane, channel_stride;
  };
  for (const DType source_type : {DType::f32, DType::bf16})
    for (const bool bf16 : {false, true})
      for (const Sizes s :
           {Sizes{1, 1, 1, 4}, Sizes{2, 3, 37, 4}, Sizes{3, 45, 70, 64}, Sizes{2, 128, 33 * 31, 128}, Sizes{1, 5, 9, 7},
            Sizes{2, 90, 41, 96}, Sizes{1, 3, 2, 4}, Sizes{2, 128, 32 * 33, 128}, Sizes{2, 90, 130, 96}}) {
        std::vector<double> source = random_vector(static_cast<std::size_t>(s.batch * s.channels * s.plane), rng);
        if (source_type == DType::bf16)
          for (double& value : source) value = round_to_bf16(static_cast<float>(value));
        const Tensor x = Tensor::from_values(source, {s.batch, s.channels, s.plane}, source_type, Device::cuda());
        const std::int64_t count = s.batch * s.plane * s.channel_stride;
        const std::vector<double> actual = poisoned_copy(bf16, count, [&](float* f, std::uint16_t* h) {
          const auto copy = [&](const auto* from) {
            if (bf16) layers::nchw_to_nhwc_bf16_cuda(ctx, from, s.batch, s.channels, s.plane, s.channel_stride, h);
            else layers::nchw_to_nhwc_cuda(ctx, from, s.batch, s.channels, s.plane, s.channel_stride, f);
          };
          if (source_type == DType::bf16) copy(x.data<BFloat16>());
          else copy(x.data<float>());
        });
        std::int64_t wrong = 0;
        for (std::int64_t n = 0; n < s.batch; ++n)
          for (std::int64_t q = 0; q < s.plane; ++q)
            for (std::int64_t c = 0; c < s.channel_stride; ++c) {
              const std::size_t at = static_cast<std::size_t>((n * s.channels + c) * s.plane + q);
              const float value_f32 = c < s.channels ? static_cast<float>(source[at]) : 0.0f;
              const double expected = bf16 ? round_to_bf16(value_f32) : value_f32;
              const double value = actual[static_cast<std::size_t>((n * s.plane + q) * s.channel_stride + c)];
              if (!(value == expected)) ++wrong;
            }
        EXPECT_EQ(wrong, 0) << (bf16 ? "bf16" : "f32") << " from " << dtype_name(source_type) << ": batch " << s.batch
                            << ", channels " << s.channels << ", plane " << s.plane << ", channel_stride "
                            << s.channel_stride;
      }
  testing::expect_error<Error>([&] { layers::nchw_to_nhwc_cuda(ctx, no_source, 1, 8, 4, 4, nullptr); },
                               {"nchw_to_nhwc", "channels 8", "channel_stride 4"});
  testing::expect_error<Error>([&] { layers::nchw_to_nhwc_bf16_cuda(ctx, no_source, 1, 8, 4, 4, nullptr); },
                               {"nchw_to_nhwc", "channels 8", "channel_stride 4"});
}

// The weight gradient's bf16 channel rows against their definition: row c is
// channel c of every pixel of the batch, rounded to bf16 by the host's bit
// rule, then zeros to row_stride; every element of a NaN-poisoned destination.
TEST(Conv2d, NchwToChannelRowsBf16CopyMatchesDefinitionCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  std::mt19937_64 rng(9);
  struct Sizes {
    std::int64_t batch, channels, plane, row_stride;
  };
  for (const Sizes s : {Sizes{1, 1, 1, 8}, Sizes{2, 3, 37, 128}, Sizes{3, 130, 300, 900}, Sizes{2, 5, 64, 128},
                        Sizes{2, 3, 2500, 5056}}) {
    const std::vector<double> source = random_vector(static_cast<std::size_t>(s.batch * s.channels * s.plane), rng);
    const Tensor x = Tensor::from_values(source, {s.batch, s.channels, s.plane}, DType::f32, Device::cuda());
    std::vector<std::uint16_t> host(static_cast<std::size_t>(s.channels * s.row_stride), 0xffff);  // bf16 NaN
    std::uint16_t* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, host.size() * sizeof(std::uint16_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    layers::nchw_to_channel_rows_bf16_cuda(ctx, x.data<float>(), s.batch, s.channels, s.plane, s.row_stride, device);
    ASSERT_EQ(cudaMemcpy(host.data(), device, host.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaFree(device), cudaSuccess);
    std::int64_t wrong = 0;
    for (std::int64_t c = 0; c < s.channels; ++c)
      for (std::int64_t k = 0; k < s.row_stride; ++k) {
        const std::int64_t n = k / s.plane, q = k % s.plane;
        const float value_f32 =
            n < s.batch ? static_cast<float>(source[static_cast<std::size_t>((n * s.channels + c) * s.plane + q)])
                        : 0.0f;
        const std::uint32_t bits = static_cast<std::uint32_t>(host[static_cast<std::size_t>(c * s.row_stride + k)])
                                   << 16;
        float value = 0.0f;
        std::memcpy(&value, &bits, sizeof value);
        if (!(value == round_to_bf16(value_f32))) ++wrong;
      }
    EXPECT_EQ(wrong, 0) << "batch " << s.batch << ", channels " << s.channels << ", plane " << s.plane
                        << ", row_stride " << s.row_stride;
  }
  testing::expect_error<Error>([&] { layers::nchw_to_channel_rows_bf16_cuda(ctx, no_source, 2, 3, 4, 7, nullptr); },
                               {"nchw_to_channel_rows_bf16", "plane 4", "row_stride 7"});
}
#endif

void expect_config_error(const json& params, const std::string& expected) {
  try {
    registry.create("Conv2d", "c", params);
    FAIL() << "expected a ConfigError for " << params.dump();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(Conv2d, RejectsBadParams) {
  expect_config_error({{"kernel", 3}}, "node 'c' (Conv2d): parameter 'out_channels' is required");
  expect_config_error({{"out_channels", 0}, {"kernel", 3}},
                      "node 'c' (Conv2d): parameter 'out_channels' must be in [1, 65536], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 0}}, "parameter 'kernel' must be in [1, 4096], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 0}},
                      "parameter 'stride' must be in [1, 4096], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"padding", -1}},
                      "parameter 'padding' must be in [0, 4096], got -1");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"output_padding", 1}},
                      "unknown parameter 'output_padding'");
  expect_config_error({{"out_channels", 4}, {"kernel", 5}, {"mask", "C"}},
                      "node 'c' (Conv2d): parameter 'mask' must be \"none\", \"A\" (the raster-scan mask without "
                      "the centre) or \"B\" (with it), got \"C\"");
  expect_config_error({{"out_channels", 4}, {"kernel", 4}, {"mask", "A"}},
                      "a masked Conv2d needs an odd kernel (the mask is centred), got kernel 4");
}

void expect_shape_error(Layer& layer, const std::vector<Shape>& inputs, const std::string& expected) {
  try {
    layer.output_shapes(inputs);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// The spec values that once overflowed the output-size and weight-size
// arithmetic (a 0-element weight, then SIGSEGV in im2col_cpu) are refused by
// name, with the limit; 2^64 - 1 is reported as written, not as -1.
TEST(Conv2d, RejectsParamsThatWouldOverflowSizes) {
  expect_config_error({{"out_channels", 4}, {"kernel", 4294967296LL}, {"padding", 2147483646}},
                      "parameter 'kernel' must be in [1, 4096], got 4294967296");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"padding", 2147483646}},
                      "parameter 'padding' must be in [0, 4096], got 2147483646");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 9223372036854775807LL}},
                      "parameter 'stride' must be in [1, 4096], got 9223372036854775807");
  expect_config_error({{"out_channels", 4}, {"kernel", 18446744073709551615ULL}},
                      "parameter 'kernel' is too large for a 64-bit integer, got 18446744073709551615");
  expect_config_error({{"out_channels", 100000}, {"kernel", 3}},
                      "parameter 'out_channels' must be in [1, 65536], got 100000");
}

TEST(Conv2d, RejectsInputsWhoseColumnMatrixWouldOverflow) {
  auto layer = registry.create("Conv2d", "c", {{"out_channels", 4}, {"kernel", 4096}, {"padding", 4096}});
  expect_shape_error(*layer, {{1, 3, 4611686018427387904LL, 8}}, "has a side larger than 17179869184");
  expect_shape_error(*layer, {{1, 65536, 4096, 4096}}, "is too large: its im2col matrix of 65536*4096*4096 rows");
}

TEST(Conv2d, RejectsBadShapes) {
  auto layer = registry.create("Conv2d", "c", {{"out_channels", 4}, {"kernel", 3}});
  expect_shape_error(*layer, {{2, 3, 8, 8}, {2, 3, 8, 8}}, "node 'c' (Conv2d): takes 1 input, got 2");
  expect_shape_error(*layer, {{3, 8, 8}}, "input must be [N, C, H, W], got [3, 8, 8]");
  expect_shape_error(*layer, {{2, 3, 2, 8}},
                     "input [2, 3, 2, 8] with padding 0 is smaller than the 3x3 kernel: the output would be empty");
  layer->output_shapes({{2, 3, 8, 8}});
  layer->create_parameters({{2, 3, 8, 8}});
  expect_shape_error(*layer, {{2, 5, 8, 8}}, "input [2, 5, 8, 8] has 5 channels but weight [4, 3, 3, 3] expects 3");
}

}  // namespace
}  // namespace plexus

// ConvTranspose2d: forward against a naive scatter loop written here and the
// adjoint identity <conv(x), y> == <x, conv_transpose(y)> with Conv2d sharing
// the weight, the CPU blocks of both in a band of rows (set_cpu_block_origin),
// gradient checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity
// including the chunked CUDA path, parameter layout, bad params and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

#include "convolution/convolution.h"
#include "convolution/few_channel_tiling.h"
#include "conv_transpose2d/conv_transpose2d.h"
#include "layers/tensor_core_reference.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

std::vector<double> random_vector(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

// The definition, PyTorch's ConvTranspose2d: every input pixel scatters its
// weighted kernel onto the output, cropped by the padding,
//   y[n, o, a*s - p + i, b*s - p + j] += W[c, o, i, j] x[n, c, a, b],
// then bias[o] is added to every output pixel.
std::vector<double> naive_conv_transpose2d(const std::vector<double>& x, const Shape& x_shape,
                                           const std::vector<double>& w, const std::vector<double>& bias,
                                           std::int64_t out, std::int64_t k, std::int64_t s, std::int64_t p,
                                           std::int64_t output_padding, Shape& y_shape) {
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t Ho = (H - 1) * s - 2 * p + k + output_padding;
  const std::int64_t Wo = (W - 1) * s - 2 * p + k + output_padding;
  y_shape = {N, out, Ho, Wo};
  std::vector<double> y(static_cast<std::size_t>(N * out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t a = 0; a < H; ++a)
        for (std::int64_t b = 0; b < W; ++b)
          for (std::int64_t o = 0; o < out; ++o)
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t row = a * s - p + i, col = b * s - p + j;
                if (row < 0 || row >= Ho || col < 0 || col >= Wo) continue;
                y[((n * out + o) * Ho + row) * Wo + col] +=
                    w[((c * out + o) * k + i) * k + j] * x[((n * C + c) * H + a) * W + b];
              }
  if (!bias.empty())
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t q = 0; q < Ho * Wo; ++q) y[(n * out + o) * Ho * Wo + q] += bias[o];
  return y;
}

// A layer of `type` built and initialised for `input_shape`.
std::unique_ptr<Layer> make_layer(const std::string& type, const json& params, const Shape& input_shape, DType dtype,
                                  Device device, std::uint64_t seed = 5) {
  auto layer = registry.create(type, "t", params);
  layer->output_shapes({input_shape});
  layer->create_parameters({input_shape});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(dtype, device, rng);
  return layer;
}

std::unique_ptr<Layer> make_layer(const json& params, const Shape& input_shape, DType dtype, Device device) {
  return make_layer("ConvTranspose2d", params, input_shape, dtype, device);
}

std::vector<double> forward(Layer& layer, const Shape& x_shape, const std::vector<double>& x_values) {
  Context ctx;
  Tensor x = Tensor::from_values(x_values, x_shape, DType::f64);
  Tensor y(layer.output_shapes({x_shape})[0], DType::f64);
  layer.forward(ctx, {&x}, {&y});
  return y.to_values();
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

// Strides 1-3, padding 0-2, kernels 1/2/3/5, output_padding 0-2, batch 1-2,
// H != W, with and without bias; kernel 2 < stride 3 leaves rows the kernel
// never reaches (bias only).
std::vector<Case> gradient_cases() {
  return {
      {{{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}, {2, 2, 4, 5}},
      {{{"out_channels", 2}, {"kernel", 5}, {"stride", 3}, {"padding", 2}, {"output_padding", 2}, {"bias", false}},
       {1, 3, 3, 4}},
      {{{"out_channels", 4}, {"kernel", 1}}, {2, 3, 3, 5}},
      {{{"out_channels", 2}, {"kernel", 3}, {"stride", 3}}, {2, 2, 3, 2}},
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 2, 3, 4}},
      {{{"out_channels", 2}, {"kernel", 3}, {"padding", 2}, {"bias", false}}, {2, 2, 5, 4}},
      {{{"out_channels", 2}, {"kernel", 2}, {"stride", 3}, {"output_padding", 1}}, {1, 2, 3, 3}},
  };
}

TEST(ConvTranspose2d, ForwardMatchesNaiveScatter) {
  std::mt19937_64 rng(17);
  for (const Case& c : gradient_cases()) {
    auto layer = make_layer(c.params, c.input, DType::f64, Device::cpu());
    const std::int64_t out = c.params["out_channels"], k = c.params["kernel"];
    const std::int64_t s = c.params.value("stride", 1), p = c.params.value("padding", 0);
    const std::int64_t output_padding = c.params.value("output_padding", 0);
    std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(c.input)), rng);
    std::vector<double> bias;
    if (c.params.value("bias", true)) bias = layer->parameter("bias").value.to_values();
    Shape expected_shape;
    std::vector<double> expected = naive_conv_transpose2d(x, c.input, layer->parameter("weight").value.to_values(),
                                                          bias, out, k, s, p, output_padding, expected_shape);
    ASSERT_EQ(layer->output_shapes({c.input})[0], expected_shape) << c.params.dump();
    expect_near_all(expected, forward(*layer, c.input, x), 1e-12, "ConvTranspose2d " + c.params.dump());
  }
}

TEST(ConvTranspose2d, HandComputedSmallCase) {
  // A 2x2 input [1 2; 3 4], 2x2 kernel of ones, stride 2: each pixel becomes a
  // 2x2 block; output_padding 1 adds a last row and column holding only the bias.
  auto layer = make_layer({{"out_channels", 1}, {"kernel", 2}, {"stride", 2}, {"output_padding", 1}}, {1, 1, 2, 2},
                          DType::f64, Device::cpu());
  layer->parameter("weight").value.copy_from(Tensor::from_values({1, 1, 1, 1}, {1, 1, 2, 2}, DType::f64));
  layer->parameter("bias").value.copy_from(Tensor::from_values({0.5}, {1}, DType::f64));
  ASSERT_EQ(layer->output_shapes({{1, 1, 2, 2}})[0], (Shape{1, 1, 5, 5}));
  EXPECT_EQ(forward(*layer, {1, 1, 2, 2}, {1, 2, 3, 4}), (std::vector<double>{1.5, 1.5, 2.5, 2.5, 0.5,  //
                                                                              1.5, 1.5, 2.5, 2.5, 0.5,  //
                                                                              3.5, 3.5, 4.5, 4.5, 0.5,  //
                                                                              3.5, 3.5, 4.5, 4.5, 0.5,  //
                                                                              0.5, 0.5, 0.5, 0.5, 0.5}));
}

// <conv(x), y> == <x, conv_transpose(y)> when ConvTranspose2d(B -> A) shares
// the weight [B, A, k, k] of Conv2d(A -> B) and output_padding restores H x W.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  struct AdjointCase {
    std::int64_t in, out, kernel, stride, padding, height, width;
  };
  std::mt19937_64 rng(23);
  for (const AdjointCase& c : {AdjointCase{3, 4, 3, 2, 1, 7, 9}, AdjointCase{2, 3, 5, 3, 2, 9, 12},
                               AdjointCase{2, 2, 9, 4, 4, 16, 12}, AdjointCase{3, 2, 1, 1, 0, 4, 5}}) {
    const std::int64_t output_padding = (c.height + 2 * c.padding - c.kernel) % c.stride;
    ASSERT_EQ(output_padding, (c.width + 2 * c.padding - c.kernel) % c.stride) << "test case needs equal remainders";
    const Shape x_shape{2, c.in, c.height, c.width};
    auto conv = make_layer(
        "Conv2d",
        {{"out_channels", c.out}, {"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}, {"bias", false}},
        x_shape, DType::f64, Device::cpu());
    const Shape y_shape = conv->output_shapes({x_shape})[0];
    auto transposed = make_layer("ConvTranspose2d",
                                 {{"out_channels", c.in},
                                  {"kernel", c.kernel},
                                  {"stride", c.stride},
                                  {"padding", c.padding},
                                  {"output_padding", output_padding},
                                  {"bias", false}},
                                 y_shape, DType::f64, Device::cpu(), 99);
    ASSERT_EQ(transposed->output_shapes({y_shape})[0], x_shape);
    ASSERT_EQ(transposed->parameter("weight").shape, conv->parameter("weight").shape);
    transposed->parameter("weight").value.copy_from(conv->parameter("weight").value);

    auto x = random_vector(static_cast<std::size_t>(shape_numel(x_shape)), rng);
    auto y = random_vector(static_cast<std::size_t>(shape_numel(y_shape)), rng);
    auto conv_x = forward(*conv, x_shape, x);
    auto transposed_y = forward(*transposed, y_shape, y);
    double left = 0.0, right = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) left += conv_x[i] * y[i], scale += std::abs(conv_x[i] * y[i]);
    for (std::size_t i = 0; i < x.size(); ++i) right += x[i] * transposed_y[i];
    EXPECT_NEAR(left, right, 1e-12 * scale) << "kernel " << c.kernel << " stride " << c.stride;
  }
}

TEST(ConvTranspose2d, ParametersUsePyTorchLayoutAndFanInBound) {
  auto layer = make_layer({{"out_channels", 8}, {"kernel", 5}, {"stride", 2}}, {2, 6, 4, 4}, DType::f32, Device::cpu());
  ASSERT_EQ(layer->parameters().size(), 2u);
  EXPECT_EQ(layer->parameter("weight").shape, (Shape{6, 8, 5, 5}));
  EXPECT_EQ(layer->parameter("bias").shape, (Shape{8}));
  const double bound = 1.0 / std::sqrt(8.0 * 5 * 5);  // PyTorch: fan_in = weight.size(1) * k * k
  for (const char* name : {"weight", "bias"}) {
    double largest = 0.0;
    for (double v : layer->parameter(name).value.to_values()) largest = std::max(largest, std::abs(v));
    EXPECT_LE(largest, bound) << name;
    EXPECT_GT(largest, 0.5 * bound) << name << " looks initialised with a smaller bound";
  }
  auto no_bias =
      make_layer({{"out_channels", 8}, {"kernel", 3}, {"bias", false}}, {2, 6, 4, 4}, DType::f32, Device::cpu());
  ASSERT_EQ(no_bias->parameters().size(), 1u);
  EXPECT_EQ(no_bias->parameters()[0]->name, "weight");
}

TEST(ConvTranspose2d, GradientsCpu) {
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "ConvTranspose2d", c.params, {c.input})));
}

TEST(ConvTranspose2d, BackwardOverwritesInputGradAndAccumulatesParameterGrads) {
  const json params = {{"out_channels", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}};
  const Shape shape{2, 2, 3, 4};
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

TEST(ConvTranspose2d, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "ConvTranspose2d", c.params, {c.input}, Device::cuda())));
}

TEST(ConvTranspose2d, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // The autoencoder's synthesis layers at reduced size, and the gradient cases.
  EXPECT_TRUE(testing::outputs_match(check_parity(
      registry, "ConvTranspose2d",
      {{"out_channels", 16}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {{3, 16, 8, 6}})));
  EXPECT_TRUE(testing::outputs_match(check_parity(
      registry, "ConvTranspose2d",
      {{"out_channels", 3}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {{2, 16, 8, 8}})));
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "ConvTranspose2d", c.params, {c.input})));
}

TEST(ConvTranspose2d, ChunkedCudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // A scratch limit of two and a half images splits a batch of 5 into chunks 2, 2, 1.
  const json params = {{"out_channels", 2}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}};
  const Shape shape{5, 3, 4, 3};
  auto cpu = make_layer(params, shape, DType::f64, Device::cpu());
  auto gpu = make_layer(params, shape, DType::f64, Device::cuda());
  for (Parameter* p : cpu->parameters()) gpu->parameter(p->name).value.copy_from(p->value);
  // Per image: columns [out*k*k, H*W] and a weight gradient [C, out*k*k].
  const std::size_t image_scratch_bytes = (18 * (4 * 3) + 3 * 18) * sizeof(double);
  auto* transposed = dynamic_cast<layers::ConvTranspose2d*>(gpu.get());
  ASSERT_NE(transposed, nullptr);
  transposed->set_scratch_limit(2 * image_scratch_bytes + image_scratch_bytes / 2);
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

// The CPU forward of a large block computes its columns in chunks of
// patches (convolution.cpp): with chunks of 48, 96 and 144 patches (the
// smallest a cap can give, and the remainder merged into the last) the
// output must be bit-identical to the one unchunked product per block that
// the default cap gives on these small images, in f32 and f64, for widths
// that are no multiple of 48, strides 1, 2 and 4, one and two images; and
// near the naive scatter, so that both are right, not only equal.
TEST(ConvTranspose2d, CpuChunksMatchWholeBlocks) {
  const std::vector<Case> cases = {
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 16, 21, 37}},
      {{{"out_channels", 8}, {"kernel", 3}, {"stride", 1}, {"padding", 1}}, {2, 5, 19, 29}},
      {{{"out_channels", 3}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {1, 12, 13, 50}},
      {{{"out_channels", 24}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}, {"bias", false}},
       {1, 7, 17, 61}},
  };
  std::mt19937_64 rng(21);
  for (const DType dtype : {DType::f32, DType::f64}) {
    const std::size_t element = dtype == DType::f32 ? sizeof(float) : sizeof(double);
    for (const Case& c : cases) {
      const std::int64_t rows = c.params["out_channels"].get<std::int64_t>() * c.params["kernel"].get<std::int64_t>() *
                                c.params["kernel"].get<std::int64_t>();
      auto whole = make_layer(c.params, c.input, dtype, Device::cpu());
      const std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(c.input)), rng);
      const Shape y_shape = whole->output_shapes({c.input})[0];
      Context ctx;
      const Tensor input = Tensor::from_values(x, c.input, dtype);
      Tensor expected(y_shape, dtype);
      whole->forward(ctx, {&input}, {&expected});
      std::vector<double> w, bias;
      w = whole->parameter("weight").value.to_values();
      if (c.params.value("bias", true)) bias = whole->parameter("bias").value.to_values();
      Shape naive_shape;
      const std::vector<double> naive =
          naive_conv_transpose2d(x, c.input, w, bias, c.params["out_channels"], c.params["kernel"], c.params["stride"],
                                 c.params.value("padding", 0), c.params.value("output_padding", 0), naive_shape);
      ASSERT_EQ(naive_shape, y_shape);
      expect_near_all(naive, expected.to_values(), dtype == DType::f32 ? 1e-5 : 1e-12, "whole blocks");
      for (const std::int64_t chunk : {48, 96, 144}) {
        auto chunked = make_layer(c.params, c.input, dtype, Device::cpu());
        for (Parameter* p : whole->parameters()) chunked->parameter(p->name).value.copy_from(p->value);
        auto* transposed = dynamic_cast<layers::ConvTranspose2d*>(chunked.get());
        ASSERT_NE(transposed, nullptr);
        transposed->set_cpu_chunk_bytes(static_cast<std::size_t>(rows * chunk + rows / 2) * element);
        Tensor actual(y_shape, dtype);
        chunked->forward(ctx, {&input}, {&actual});
        ASSERT_EQ(std::memcmp(expected.raw_data(), actual.raw_data(), expected.nbytes()), 0)
            << shape_str(c.input) << " " << c.params.dump() << " chunks of " << chunk << " patches, "
            << (dtype == DType::f32 ? "f32" : "f64");
      }
    }
  }
}

// A band of input rows [r0, r1), told where its output starts in the whole
// image (Convolution::set_cpu_block_origin: r0 * s for a ConvTranspose2d,
// r0 / s for a Conv2d), cuts its output into the whole image's CPU blocks:
// every output row of a whole-image block that the band holds whole, with
// every input row the block reads, has the whole image's bits, in f32 and
// f64, for Conv2d and ConvTranspose2d (with groups too), on latents whose
// blocks hold numbers of pixels that are not multiples of a vector's width
// (31 or 61 wide), over bands that start inside a block. Without the origin
// some of those rows differ in f32: the test can tell.
TEST(ConvTranspose2d, CpuBlocksFollowABandsOrigin) {
  struct BandCase {
    std::string type;
    json params;
    Shape input;
  };
  const std::vector<BandCase> cases = {
      {"ConvTranspose2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
       {1, 96, 40, 31}},
      {"ConvTranspose2d", {{"out_channels", 24}, {"kernel", 3}, {"padding", 1}, {"groups", 2}}, {1, 32, 60, 61}},
      {"Conv2d", {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {1, 96, 120, 62}},
      {"Conv2d", {{"out_channels", 24}, {"kernel", 3}, {"padding", 1}, {"groups", 2}}, {1, 32, 90, 61}},
  };
  std::mt19937_64 rng(33);
  bool origin_told = false;  // whether some row differs without the origin
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const BandCase& c : cases) {
      const bool transposed = c.type == "ConvTranspose2d";
      const std::int64_t k = c.params["kernel"], s = c.params.value("stride", 1), p = c.params.value("padding", 0);
      auto whole = make_layer(c.type, c.params, c.input, dtype, Device::cpu());
      const Shape y_shape = whole->output_shapes({c.input})[0];
      const std::vector<double> x = random_vector(static_cast<std::size_t>(shape_numel(c.input)), rng);
      Context ctx;
      const Tensor input = Tensor::from_values(x, c.input, dtype);
      Tensor expected(y_shape, dtype);
      whole->forward(ctx, {&input}, {&expected});
      // The whole image's blocks of output rows, and the input rows each output row reads.
      layers::ConvGeometry g;
      const Shape& image = transposed ? y_shape : c.input;
      const Shape& patches = transposed ? c.input : y_shape;
      g.channels = image[1];
      g.height = image[2];
      g.width = image[3];
      g.kernel = k;
      g.stride = s;
      g.padding = p;
      g.patches_high = patches[2];
      g.patches_wide = patches[3];
      const std::int64_t block = transposed ? layers::cpu_image_rows_per_block(g) : layers::cpu_patch_rows_per_block(g);
      const std::int64_t height = c.input[2], out_height = y_shape[2], plane_out = y_shape[2] * y_shape[3];
      const auto first_read = [&](std::int64_t row) {  // the first input row output row `row` reads
        const std::int64_t lowest = transposed ? row + p - (k - 1) : row * s - p;
        return lowest <= 0 ? 0 : transposed ? (lowest + s - 1) / s : lowest;
      };
      const auto last_read = [&](std::int64_t row) {  // one past the last
        return std::min(height, transposed ? (row + p) / s + 1 : row * s - p + k);
      };
      const std::int64_t stride_rows = transposed ? 1 : s;  // bands start on a multiple of this
      for (const std::int64_t r0 : {3 * stride_rows, 7 * stride_rows, 11 * stride_rows}) {
        const std::int64_t r1 = std::min(height, r0 + 40 * stride_rows);
        const Shape band_shape{c.input[0], c.input[1], r1 - r0, c.input[3]};
        const std::vector<double> band_values = [&] {
          std::vector<double> values;
          const std::int64_t plane = height * c.input[3];
          for (std::int64_t ch = 0; ch < c.input[1]; ++ch)
            values.insert(values.end(), x.begin() + ch * plane + r0 * c.input[3],
                          x.begin() + ch * plane + r1 * c.input[3]);
          return values;
        }();
        const Tensor band_input = Tensor::from_values(band_values, band_shape, dtype);
        const std::int64_t origin = transposed ? r0 * s : r0 / s;
        for (const bool tell : {true, false}) {
          auto band = make_layer(c.type, c.params, band_shape, dtype, Device::cpu());
          for (Parameter* param : whole->parameters()) band->parameter(param->name).value.copy_from(param->value);
          if (tell) dynamic_cast<layers::Convolution&>(*band).set_cpu_block_origin(origin);
          const Shape band_out = band->output_shapes({band_shape})[0];
          Tensor actual(band_out, dtype);
          band->forward(ctx, {&band_input}, {&actual});
          const std::vector<double> want = expected.to_values(), got = actual.to_values();
          std::int64_t compared = 0;
          for (std::int64_t b0 = 0; b0 < out_height; b0 += block) {
            const std::int64_t b1 = std::min(out_height, b0 + block);
            if (b0 < origin || b1 > origin + band_out[2] || first_read(b0) < r0 || last_read(b1 - 1) > r1) continue;
            for (std::int64_t row = b0; row < b1; ++row)
              for (std::int64_t ch = 0; ch < y_shape[1]; ++ch)
                for (std::int64_t col = 0; col < y_shape[3]; ++col) {
                  const double w = want[ch * plane_out + row * y_shape[3] + col];
                  const double a = got[(ch * band_out[2] + row - origin) * y_shape[3] + col];
                  if (tell)
                    ASSERT_EQ(w, a) << c.type << " " << c.params.dump() << " band " << r0 << ".." << r1 << " row "
                                    << row << " channel " << ch << " column " << col;
                  else origin_told = origin_told || w != a;
                }
            ++compared;
          }
          EXPECT_GE(compared, 1) << c.type << " " << c.params.dump() << " band " << r0 << ".." << r1;
        }
      }
    }
  }
  EXPECT_TRUE(origin_told) << "no row differs without the origin: the cases no longer test it";
}

// Shapes the tensor-core engine must get right: batch 1, odd sizes, channels
// not a multiple of 8, 3 output channels (the synthesis transform's last
// layer), more than one 128-row tile, output_padding 0 to stride - 1, even
// kernels, stride 3 and 4, a kernel smaller than the stride (output pixels no
// tap reaches: bias only), split K (small images, long K), tap-major K (>= 32
// source channels, not a multiple of 32, from the NHWC copy) at strides 1 to
// 4 in both directions, the weight gradient's tap-major K read from NHWC (128
// and 256 output channels, the engine's Ci: batch 1, stride 1 and 2, whole
// and partial tiles of pixels, a pixel sum split mid-image at 32 and at 64
// pixels per stage), passes with <= 16 rows
// that go to cuBLAS + im2col next to the engine's, and forwards onto 1 to 4
// channels, which layers::few_channel_conv::backward_data runs (see
// FewChannelKernelTakesTheLayersOntoImages): 5x5/2 and 9x9/4 onto 3
// channels, stride 1 and 3, odd sizes, batch 1, output_padding, an even
// kernel without bias, a kernel smaller than the stride, 5, 33, 40, 128 and
// 130 input channels (K not a whole stage), images of several tiles in
// both directions, a region wider than the image, and inputs whose width is
// a multiple of 4 (the region's rows copied as 16-byte chunks).
std::vector<Case> tensor_core_cases() {
  return {
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 128, 9, 7}},
      {{{"out_channels", 3}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {1, 130, 5, 6}},
      {{{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}, {2, 40, 11, 13}},
      {{{"out_channels", 1}, {"kernel", 5}, {"stride", 3}, {"padding", 1}, {"output_padding", 2}}, {1, 5, 7, 4}},
      {{{"out_channels", 2}, {"kernel", 4}, {"stride", 2}, {"padding", 1}, {"bias", false}}, {3, 33, 6, 5}},
      {{{"out_channels", 3}, {"kernel", 2}, {"stride", 4}, {"output_padding", 1}}, {2, 24, 3, 4}},
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 20, 23, 37}},
      {{{"out_channels", 3}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {2, 16, 9, 13}},
      {{{"out_channels", 3}, {"kernel", 1}}, {1, 7, 5, 3}},
      {{{"out_channels", 2}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 16, 20, 32}},
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 16, 64, 64}},
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 12, 5, 7}},
      {{{"out_channels", 19}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 9, 6, 5}},
      {{{"out_channels", 17}, {"kernel", 3}, {"stride", 3}, {"padding", 1}, {"output_padding", 2}}, {2, 20, 4, 5}},
      {{{"out_channels", 18}, {"kernel", 4}, {"stride", 2}, {"padding", 1}, {"bias", false}}, {3, 7, 5, 6}},
      {{{"out_channels", 130}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {1, 20, 3, 4}},
      {{{"out_channels", 20}, {"kernel", 2}, {"stride", 4}, {"output_padding", 1}}, {2, 3, 3, 4}},
      {{{"out_channels", 24}, {"kernel", 3}, {"padding", 1}}, {2, 33, 6, 7}},
      {{{"out_channels", 40}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 64, 4, 4}},
      {{{"out_channels", 128}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}, {1, 24, 4, 3}},
      {{{"out_channels", 128}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 20, 16, 16}},
      {{{"out_channels", 256}, {"kernel", 3}, {"padding", 1}}, {1, 16, 5, 7}},
      {{{"out_channels", 128}, {"kernel", 3}, {"padding", 1}}, {3, 20, 19, 23}},
      {{{"out_channels", 45}, {"kernel", 5}, {"stride", 3}, {"padding", 1}, {"output_padding", 2}}, {1, 37, 5, 4}},
      {{{"out_channels", 34}, {"kernel", 4}, {"stride", 4}, {"output_padding", 3}}, {2, 35, 3, 5}},
      // Source channels 192 and 128 (three and two 64-channel bf16 stages per
      // tap on Hopper's wgmma path), 48 output channels.
      {{{"out_channels", 48}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {1, 192, 5, 6}},
      {{{"out_channels", 192}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}, {2, 128, 4, 5}},
      // Inputs 64 and 16 wide, >= 64 channels both sides: the Hopper weight
      // gradient (TMA boxes of the output gradient's stride phases); at BF16
      // the 16-pixel rows go four to a K tile (5 rows: the second tile holds
      // one real row), as in a synthesis transform's first layer at 16x16.
      {{{"out_channels", 80}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 64, 9, 64}},
      {{{"out_channels", 96}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 64, 5, 16}},
      // 1 to 4 output channels (the layer writing an RGB image): its input
      // gradient and weight gradient run the few-channel kernels
      // (few_channel_conv.h) over 64-pixel tiles of its input's rows.
      {{{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}, {2, 128, 6, 33}},
      {{{"out_channels", 4}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}}, {1, 20, 4, 17}},
      {{{"out_channels", 1}, {"kernel", 3}, {"padding", 1}, {"bias", false}}, {2, 24, 5, 70}},
  };
}

TEST(ConvTranspose2d, TensorCoreCudaMatchesF64Reference) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::uint64_t seed = 200;
  for (const Case& c : tensor_core_cases()) {
    const testing::TensorCoreErrors errors =
        testing::tensor_core_errors(registry, "ConvTranspose2d", c.params, c.input, seed++, Precision::tf32);
    testing::expect_within(errors, testing::kTf32Tolerance, c.params.dump() + " on " + shape_str(c.input));
  }
}

// The same cases with BF16 products: within the bf16 tolerance, and visibly
// rounded to bf16 (so the test fails if bf16 silently ran as TF32).
TEST(ConvTranspose2d, TensorCoreBf16CudaMatchesF64Reference) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::uint64_t seed = 200;
  for (const Case& c : tensor_core_cases()) {
    const std::string what = c.params.dump() + " on " + shape_str(c.input);
    const testing::TensorCoreErrors bf16 =
        testing::tensor_core_errors(registry, "ConvTranspose2d", c.params, c.input, seed, Precision::bf16);
    const testing::TensorCoreErrors tf32 =
        testing::tensor_core_errors(registry, "ConvTranspose2d", c.params, c.input, seed++, Precision::tf32);
    testing::expect_within(bf16, testing::kBf16Tolerance, what);
    testing::expect_bf16_rounding_shows(bf16, tf32, what);
    std::cout << what << "\n  bf16: " << testing::describe(bf16) << "\n  tf32: " << testing::describe(tf32) << "\n";
  }
}

// The forward of a ConvTranspose2d onto an image (<= 4 channels) is the
// engine's backward_data, run by few_channel_conv's kernel: the layers that
// end the synthesis transforms (5x5/2 128->3 from 128x128 to 256x256, and
// 9x9/4 128->3 from 64x64), with the tiling worked out by hand from
// few_channel_tiling.h's formulas; problems it refuses (5 channels, 9x9
// at stride 1, whose region of Y exceeds every variant's rows) stay with
// im2col + cuBLAS. Host logic: runs without a GPU.
TEST(ConvTranspose2d, FewChannelKernelTakesTheLayersOntoImages) {
  const auto problem = [](long long channels, long long size, long long kernel, long long stride, long long padding,
                          long long output_padding, long long out_channels) {
    auto layer = registry.create("ConvTranspose2d", "t",
                                 {{"out_channels", out_channels},
                                  {"kernel", kernel},
                                  {"stride", stride},
                                  {"padding", padding},
                                  {"output_padding", output_padding}});
    const Shape output = layer->output_shapes({{16, channels, size, size}})[0];
    // The Conv2d from this layer's output to its input.
    layers::implicit_gemm::ConvProblem conv;
    conv.batch = 16;
    conv.in_channels = output[1];
    conv.height = output[2];
    conv.width = output[3];
    conv.out_channels = channels;
    conv.out_height = conv.out_width = size;
    conv.kernel = kernel;
    conv.stride = stride;
    conv.padding = padding;
    return conv;
  };
  const layers::implicit_gemm::ConvProblem five = problem(128, 128, 5, 2, 2, 1, 3);
  ASSERT_EQ(five.height, 256);
  EXPECT_TRUE(layers::implicit_gemm::takes_backward_data(five));
  // Y is 128 wide: regions of whole 16-byte chunks (col_align 4). Tile 12 x
  // 52: Y rows floor((h + 2 - 4)/2) .. floor((h + 2)/2) give 8 region rows;
  // 28 columns, rounded to chunks with up to 3 of slack, 32; 8 x 32 = 256
  // GEMM rows. 22 x 5 = 110 tiles, as few as any tiling whose region fits.
  const layers::few_channel_conv::BackwardDataTiling five_tiling = layers::few_channel_conv::backward_data_tiling(five);
  EXPECT_EQ(five_tiling.variant, 1);
  EXPECT_EQ(five_tiling.col_align, 4);
  EXPECT_EQ(five_tiling.tile_h, 12);
  EXPECT_EQ(five_tiling.tile_w, 52);
  EXPECT_EQ(five_tiling.region_h, 8);
  EXPECT_EQ(five_tiling.region_w, 32);
  EXPECT_EQ(five_tiling.row_shift, -1);

  // 243 weight columns: the 64 x 256 variant; 24 x 24 tiles read 8 x 8 pixels
  // of Y (whole chunks would take 12 x 24 tiles, twice as many: col_align 1).
  const layers::implicit_gemm::ConvProblem nine = problem(128, 64, 9, 4, 4, 3, 3);
  ASSERT_EQ(nine.height, 256);
  EXPECT_TRUE(layers::implicit_gemm::takes_backward_data(nine));
  const layers::few_channel_conv::BackwardDataTiling nine_tiling = layers::few_channel_conv::backward_data_tiling(nine);
  EXPECT_EQ(nine_tiling.variant, 2);
  EXPECT_EQ(nine_tiling.tile_h, 24);
  EXPECT_EQ(nine_tiling.tile_w, 24);
  EXPECT_EQ(nine_tiling.region_h, 8);
  EXPECT_EQ(nine_tiling.region_w, 8);
  EXPECT_EQ(nine_tiling.col_align, 1);

  EXPECT_TRUE(layers::few_channel_conv::takes_backward_data(problem(5, 7, 1, 1, 0, 0, 4)));
  EXPECT_FALSE(layers::few_channel_conv::takes_backward_data(problem(128, 64, 5, 2, 2, 1, 5)));
  EXPECT_FALSE(layers::implicit_gemm::takes_backward_data(problem(128, 64, 5, 2, 2, 1, 5)));
  EXPECT_FALSE(layers::few_channel_conv::takes_backward_data(problem(16, 32, 9, 1, 4, 0, 3)));
  EXPECT_FALSE(layers::implicit_gemm::takes_backward_data(problem(16, 32, 9, 1, 4, 0, 3)));
}

void expect_config_error(const json& params, const std::string& expected) {
  try {
    registry.create("ConvTranspose2d", "t", params);
    FAIL() << "expected a ConfigError for " << params.dump();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(ConvTranspose2d, RejectsBadParams) {
  expect_config_error({{"out_channels", 4}}, "node 't' (ConvTranspose2d): parameter 'kernel' is required");
  expect_config_error({{"out_channels", 0}, {"kernel", 3}}, "parameter 'out_channels' must be in [1, 65536], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 0}}, "parameter 'kernel' must be in [1, 4096], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 0}},
                      "parameter 'stride' must be in [1, 4096], got 0");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"padding", -2}},
                      "parameter 'padding' must be in [0, 4096], got -2");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"output_padding", -1}},
                      "parameter 'output_padding' must be in [0, 4096], got -1");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"output_padding", 2}},
                      "node 't' (ConvTranspose2d): parameter 'output_padding' must be < stride (2), got 2");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"output_padding", 1}},
                      "parameter 'output_padding' must be < stride (1), got 1");
}

void expect_shape_error(Layer& layer, const std::vector<Shape>& inputs, const std::string& expected) {
  try {
    layer.output_shapes(inputs);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// Values that once overflowed (H - 1) * stride and the weight size (a hang
// in col2im_cpu reading out of bounds) are refused by name, with the limit.
TEST(ConvTranspose2d, RejectsParamsThatWouldOverflowSizes) {
  expect_config_error({{"out_channels", 4}, {"kernel", 4294967296LL}, {"padding", 2147483646}},
                      "parameter 'kernel' must be in [1, 4096], got 4294967296");
  expect_config_error({{"out_channels", 4}, {"kernel", 3}, {"stride", 4611686018427387904LL}},
                      "parameter 'stride' must be in [1, 4096], got 4611686018427387904");
  expect_config_error({{"out_channels", 4}, {"kernel", 18446744073709551615ULL}},
                      "parameter 'kernel' is too large for a 64-bit integer, got 18446744073709551615");
  auto layer = registry.create("ConvTranspose2d", "t", {{"out_channels", 4}, {"kernel", 4096}, {"stride", 4096}});
  expect_shape_error(*layer, {{1, 3, 4611686018427387904LL, 8}}, "has a side larger than 17179869184");
  expect_shape_error(*layer, {{1, 3, 1 << 20, 1 << 20}}, "is too large: its im2col matrix of 4*4096*4096 rows");
}

TEST(ConvTranspose2d, RejectsBadShapes) {
  auto layer = registry.create("ConvTranspose2d", "t", {{"out_channels", 4}, {"kernel", 3}, {"padding", 2}});
  expect_shape_error(*layer, {{2, 3, 8, 8}, {2, 3, 8, 8}}, "node 't' (ConvTranspose2d): takes 1 input, got 2");
  expect_shape_error(*layer, {{2, 3, 8, 8, 1}}, "input must be [N, C, H, W], got [2, 3, 8, 8, 1]");
  // (1 - 1)*1 - 2*2 + 3 + 0 = -1 rows.
  expect_shape_error(*layer, {{2, 3, 1, 8}},
                     "input [2, 3, 1, 8] gives an empty output [2, 4, -1, 6]: (H - 1)*stride - 2*padding + kernel "
                     "+ output_padding must be >= 1");
  layer->output_shapes({{2, 3, 8, 8}});
  layer->create_parameters({{2, 3, 8, 8}});
  expect_shape_error(*layer, {{2, 5, 8, 8}}, "input [2, 5, 8, 8] has 5 channels but weight [3, 4, 3, 3] expects 3");
}

}  // namespace
}  // namespace plexus

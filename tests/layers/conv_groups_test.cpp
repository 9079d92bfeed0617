// Conv2d and ConvTranspose2d with groups and dilation (grouped, depthwise,
// dilated): forward against naive sums written here, f64 gradient checks
// (CPU; CUDA on a GPU), CPU/CUDA parity (f32, f64 with chunked scratch, bf16
// storage), PyTorch's parameter layouts, the fused activation, and errors
// that name the culprit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "convolution/convolution.h"
#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

std::vector<double> random_vector(std::int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(n));
  for (auto& v : values) v = dist(rng);
  return values;
}

struct ConvParams {
  std::int64_t out, k, s, p, d, groups, output_padding;
};

ConvParams conv_params(const json& params) {
  return {params["out_channels"],           params["kernel"],
          params.value("stride", 1),        params.value("padding", 0),
          params.value("dilation", 1),      params.value("groups", 1),
          params.value("output_padding", 0)};
}

// Conv2d by its definition, one term at a time: output channel o of group
// g = o / (out/G) reads the C/G input channels of that group,
//   y[n, o, a, b] = bias[o] + sum_{c < C/G, i, j} W[o, c, i, j] x[n, g*C/G + c, a*s - p + i*d, b*s - p + j*d]
// with x = 0 outside the image.
std::vector<double> naive_conv2d(const std::vector<double>& x, const Shape& x_shape, const std::vector<double>& w,
                                 const std::vector<double>& bias, const ConvParams& c, Shape& y_shape) {
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t reach = c.d * (c.k - 1) + 1;
  const std::int64_t Ho = (H + 2 * c.p - reach) / c.s + 1, Wo = (W + 2 * c.p - reach) / c.s + 1;
  const std::int64_t in_group = C / c.groups, out_group = c.out / c.groups;
  y_shape = {N, c.out, Ho, Wo};
  std::vector<double> y(static_cast<std::size_t>(N * c.out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < c.out; ++o)
      for (std::int64_t a = 0; a < Ho; ++a)
        for (std::int64_t b = 0; b < Wo; ++b) {
          double sum = bias.empty() ? 0.0 : bias[o];
          for (std::int64_t ci = 0; ci < in_group; ++ci)
            for (std::int64_t i = 0; i < c.k; ++i)
              for (std::int64_t j = 0; j < c.k; ++j) {
                const std::int64_t row = a * c.s - c.p + i * c.d, col = b * c.s - c.p + j * c.d;
                if (row < 0 || row >= H || col < 0 || col >= W) continue;
                const std::int64_t channel = o / out_group * in_group + ci;
                sum += w[((o * in_group + ci) * c.k + i) * c.k + j] * x[((n * C + channel) * H + row) * W + col];
              }
          y[((n * c.out + o) * Ho + a) * Wo + b] = sum;
        }
  return y;
}

// ConvTranspose2d by its definition: input channel c of group g = c / (C/G)
// scatters onto the out/G output channels of that group,
//   y[n, g*out/G + o, a*s - p + i*d, b*s - p + j*d] += W[c, o, i, j] x[n, c, a, b],   plus bias[o] everywhere.
std::vector<double> naive_conv_transpose2d(const std::vector<double>& x, const Shape& x_shape,
                                           const std::vector<double>& w, const std::vector<double>& bias,
                                           const ConvParams& c, Shape& y_shape) {
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t reach = c.d * (c.k - 1) + 1;
  const std::int64_t Ho = (H - 1) * c.s - 2 * c.p + reach + c.output_padding;
  const std::int64_t Wo = (W - 1) * c.s - 2 * c.p + reach + c.output_padding;
  const std::int64_t in_group = C / c.groups, out_group = c.out / c.groups;
  y_shape = {N, c.out, Ho, Wo};
  std::vector<double> y(static_cast<std::size_t>(N * c.out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < c.out; ++o)
      for (std::int64_t q = 0; q < Ho * Wo; ++q)
        y[static_cast<std::size_t>((n * c.out + o) * Ho * Wo + q)] = bias.empty() ? 0.0 : bias[o];
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ci = 0; ci < C; ++ci)
      for (std::int64_t a = 0; a < H; ++a)
        for (std::int64_t b = 0; b < W; ++b)
          for (std::int64_t o = 0; o < out_group; ++o)
            for (std::int64_t i = 0; i < c.k; ++i)
              for (std::int64_t j = 0; j < c.k; ++j) {
                const std::int64_t row = a * c.s - c.p + i * c.d, col = b * c.s - c.p + j * c.d;
                if (row < 0 || row >= Ho || col < 0 || col >= Wo) continue;
                const std::int64_t channel = ci / in_group * out_group + o;
                y[((n * c.out + channel) * Ho + row) * Wo + col] +=
                    w[((ci * out_group + o) * c.k + i) * c.k + j] * x[((n * C + ci) * H + a) * W + b];
              }
  return y;
}

struct Case {
  std::string type;
  json params;
  Shape input;
};

// Grouped (2 and 3 groups, channels per group 1 to 3 on either side),
// depthwise (groups = in = out: 3x3 and 5x5, strides 1 and 2; and with a
// channel multiplier, out = 2 in), dilated (2 and 3, with and without
// groups), strides 1 to 3, output_padding up to max(stride, dilation) - 1,
// batches 1 and 2, H != W, with and without bias.
std::vector<Case> cases() {
  return {
      {"Conv2d", {{"out_channels", 6}, {"kernel", 3}, {"padding", 1}, {"groups", 2}}, {2, 4, 5, 6}},
      {"Conv2d",
       {{"out_channels", 3},
        {"kernel", 3},
        {"stride", 2},
        {"padding", 2},
        {"dilation", 2},
        {"groups", 3},
        {"bias", false}},
       {1, 6, 9, 7}},
      {"Conv2d", {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}, {"groups", 4}}, {2, 4, 6, 5}},
      {"Conv2d", {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"groups", 3}}, {2, 3, 9, 8}},
      {"Conv2d", {{"out_channels", 6}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"groups", 3}}, {1, 3, 7, 6}},
      {"Conv2d", {{"out_channels", 3}, {"kernel", 3}, {"padding", 2}, {"dilation", 2}}, {2, 2, 6, 7}},
      {"Conv2d",
       {{"out_channels", 3}, {"kernel", 3}, {"stride", 3}, {"padding", 3}, {"dilation", 3}, {"groups", 3}},
       {1, 3, 10, 8}},
      {"ConvTranspose2d",
       {{"out_channels", 6}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}, {"groups", 2}},
       {2, 4, 4, 3}},
      {"ConvTranspose2d",
       {{"out_channels", 4}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}, {"groups", 4}},
       {2, 4, 3, 4}},
      {"ConvTranspose2d",
       {{"out_channels", 2}, {"kernel", 3}, {"padding", 1}, {"dilation", 2}, {"bias", false}},
       {1, 3, 4, 5}},
      {"ConvTranspose2d", {{"out_channels", 2}, {"kernel", 3}, {"dilation", 2}, {"output_padding", 1}}, {2, 2, 3, 4}},
      {"ConvTranspose2d", {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}, {"groups", 3}}, {1, 6, 4, 4}},
      {"ConvTranspose2d",
       {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"dilation", 2}, {"groups", 2}},
       {2, 6, 3, 3}},
  };
}

std::string describe(const Case& c) { return c.type + " " + c.params.dump() + " on " + shape_str(c.input); }

// A layer built and initialised for `input_shape`.
std::unique_ptr<Layer> make_layer(const Case& c, DType dtype, Device device, std::uint64_t seed = 5) {
  auto layer = registry.create(c.type, "c", c.params);
  layer->output_shapes({c.input});
  layer->create_parameters({c.input});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(dtype, device, rng);
  return layer;
}

void expect_near_all(const std::vector<double>& expected, const std::vector<double>& actual, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(expected[i], actual[i], tolerance * std::max(1.0, std::abs(expected[i]))) << what << " [" << i << "]";
}

// The layer's forward in f64 on the CPU against the naive sum above: the
// cases, and images wide and high enough that the CPU passes cut them into
// several blocks of rows (Conv2d: blocks of 256 patches, 7 rows of 40;
// ConvTranspose2d: blocks of 8 times the 4 rows a dilated 3x3 kernel
// reaches, 32 of 81 rows), the blocks' halos overlapping.
TEST(ConvGroups, ForwardMatchesNaiveSums) {
  std::mt19937_64 rng(17);
  std::vector<Case> all = cases();
  all.push_back(
      {"Conv2d", {{"out_channels", 4}, {"kernel", 3}, {"padding", 2}, {"dilation", 2}, {"groups", 2}}, {2, 4, 45, 40}});
  all.push_back({"ConvTranspose2d",
                 {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"dilation", 2}, {"groups", 2}},
                 {1, 4, 40, 40}});
  for (const Case& c : all) {
    auto layer = make_layer(c, DType::f64, Device::cpu());
    const std::vector<double> x = random_vector(shape_numel(c.input), rng);
    std::vector<double> bias;
    if (c.params.value("bias", true)) bias = layer->parameter("bias").value.to_values();
    const std::vector<double> w = layer->parameter("weight").value.to_values();
    Shape expected_shape;
    const std::vector<double> expected =
        c.type == "Conv2d" ? naive_conv2d(x, c.input, w, bias, conv_params(c.params), expected_shape)
                           : naive_conv_transpose2d(x, c.input, w, bias, conv_params(c.params), expected_shape);
    ASSERT_EQ(layer->output_shapes({c.input})[0], expected_shape) << describe(c);
    Context ctx;
    Tensor input = Tensor::from_values(x, c.input, DType::f64);
    Tensor output(expected_shape, DType::f64);
    layer->forward(ctx, {&input}, {&output});
    expect_near_all(expected, output.to_values(), 1e-12, describe(c));
  }
}

// A hand-computed depthwise case: two channels, each its own 2x2 kernel.
TEST(ConvGroups, HandComputedDepthwiseCase) {
  const Case c{"Conv2d", {{"out_channels", 2}, {"kernel", 2}, {"groups", 2}}, {1, 2, 2, 3}};
  auto layer = make_layer(c, DType::f64, Device::cpu());
  layer->parameter("weight").value.copy_from(Tensor::from_values({1, 0, 0, 1, 0, 0, 0, 2}, {2, 1, 2, 2}, DType::f64));
  layer->parameter("bias").value.copy_from(Tensor::from_values({0.5, -1}, {2}, DType::f64));
  Context ctx;
  // Channel 0: [1 2 3; 4 5 6] with the diagonal kernel; channel 1: [7 8 9; 10 11 12], 2 * bottom-right.
  Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {1, 2, 2, 3}, DType::f64);
  Tensor y({1, 2, 1, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{1 + 5 + 0.5, 2 + 6 + 0.5, 2 * 11 - 1, 2 * 12 - 1}));
}

TEST(ConvGroups, ParametersUsePyTorchLayoutAndFanInBound) {
  const Case conv{"Conv2d", {{"out_channels", 8}, {"kernel", 3}, {"groups", 4}}, {1, 12, 6, 6}};
  const Case transposed{"ConvTranspose2d", {{"out_channels", 8}, {"kernel", 3}, {"groups", 4}}, {1, 12, 6, 6}};
  auto conv_layer = make_layer(conv, DType::f32, Device::cpu());
  auto transposed_layer = make_layer(transposed, DType::f32, Device::cpu());
  EXPECT_EQ(conv_layer->parameter("weight").shape, (Shape{8, 3, 3, 3}));         // [out, in/G, k, k]
  EXPECT_EQ(transposed_layer->parameter("weight").shape, (Shape{12, 2, 3, 3}));  // [in, out/G, k, k]
  EXPECT_EQ(conv_layer->parameter("bias").shape, (Shape{8}));
  EXPECT_EQ(transposed_layer->parameter("bias").shape, (Shape{8}));
  // PyTorch's bound 1/sqrt(weight.size(1)*k*k).
  for (const auto& [layer, fan_in] :
       {std::pair{conv_layer.get(), 3.0 * 9}, std::pair{transposed_layer.get(), 2.0 * 9}}) {
    const double bound = 1.0 / std::sqrt(fan_in);
    double largest = 0.0;
    for (double v : layer->parameter("weight").value.to_values()) largest = std::max(largest, std::abs(v));
    EXPECT_LE(largest, bound);
    EXPECT_GT(largest, 0.5 * bound) << "looks initialised with a smaller bound";
  }
}

TEST(ConvGroups, GradientsCpu) {
  for (const Case& c : cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, c.type, c.params, {c.input}))) << describe(c);
}

TEST(ConvGroups, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, c.type, c.params, {c.input}, Device::cuda())))
        << describe(c);
}

TEST(ConvGroups, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<Case> all = cases();
  // Larger: a depthwise 5x5 over 64 channels, and 8 groups of 16 channels at dilation 2.
  all.push_back({"Conv2d", {{"out_channels", 64}, {"kernel", 5}, {"padding", 2}, {"groups", 64}}, {2, 64, 17, 19}});
  all.push_back({"Conv2d",
                 {{"out_channels", 128}, {"kernel", 3}, {"padding", 2}, {"dilation", 2}, {"groups", 8}},
                 {2, 128, 12, 9}});
  all.push_back(
      {"ConvTranspose2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}, {"groups", 64}},
       {2, 64, 8, 9}});
  for (const Case& c : all)
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, c.type, c.params, {c.input}))) << describe(c);
}

struct Results {
  std::vector<double> output, input_grad;
  std::map<std::string, std::vector<double>> parameter_grads;
};

// Forward once, then backward twice (parameter gradients accumulate) with output gradient dy.
Results run(Layer& layer, Device device, DType dtype, const Shape& x_shape, const std::vector<double>& x_values,
            const std::vector<double>& dy_values) {
  Context ctx(device);
  const Shape y_shape = layer.output_shapes({x_shape})[0];
  Tensor x = Tensor::from_values(x_values, x_shape, dtype, device);
  Tensor y(y_shape, dtype, device);
  Tensor dy = Tensor::from_values(dy_values, y_shape, dtype, device);
  Tensor dx(x_shape, dtype, device);
  for (Parameter* p : layer.parameters()) p->grad.fill_zero();
  layer.forward(ctx, {&x}, {&y});
  for (int call = 0; call < 2; ++call) layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  ctx.synchronize();
  Results results{y.to_values(), dx.to_values(), {}};
  for (Parameter* p : layer.parameters()) results.parameter_grads[p->name] = p->grad.to_values();
  return results;
}

// f64 on CUDA equals f64 on the CPU to rounding, with the CUDA scratch
// limited to one and a half images (a batch of 3 in chunks of one image).
TEST(ConvGroups, ChunkedCudaMatchesCpuInF64) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(8);
  for (Case c : cases()) {
    c.input[0] = 3;
    auto cpu = make_layer(c, DType::f64, Device::cpu());
    auto gpu = make_layer(c, DType::f64, Device::cuda());
    for (Parameter* p : cpu->parameters()) gpu->parameter(p->name).value.copy_from(p->value);
    auto* conv = dynamic_cast<layers::Convolution*>(gpu.get());
    ASSERT_NE(conv, nullptr);
    conv->set_scratch_limit(1);  // at least one image per chunk
    const std::vector<double> x = random_vector(shape_numel(c.input), rng);
    const std::vector<double> dy = random_vector(shape_numel(cpu->output_shapes({c.input})[0]), rng);
    const Results expected = run(*cpu, Device::cpu(), DType::f64, c.input, x, dy);
    const Results actual = run(*gpu, Device::cuda(), DType::f64, c.input, x, dy);
    expect_near_all(expected.output, actual.output, 1e-12, describe(c) + " output");
    expect_near_all(expected.input_grad, actual.input_grad, 1e-12, describe(c) + " input gradient");
    for (const auto& [name, grad] : expected.parameter_grads)
      expect_near_all(grad, actual.parameter_grads.at(name), 1e-12, describe(c) + " " + name + " gradient");
  }
}

// The Net may store activations in bf16 around a convolution on CUDA: the
// grouped passes read and write them through f32 stand-ins, so each result
// is the f32 result (of the same, bf16-representable, inputs) rounded to bf16.
TEST(ConvGroups, Bf16StorageOnCudaIsTheF32ResultRounded) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(9);
  for (const Case& c : cases()) {
    auto f32 = make_layer(c, DType::f32, Device::cuda());
    auto bf16 = make_layer(c, DType::f32, Device::cuda());
    const Shape y_shape = f32->output_shapes({c.input})[0];
    // Inputs representable in bf16: rounded once through a bf16 tensor.
    const std::vector<double> x =
        Tensor::from_values(random_vector(shape_numel(c.input), rng), c.input, DType::bf16).to_values();
    const std::vector<double> dy =
        Tensor::from_values(random_vector(shape_numel(y_shape), rng), y_shape, DType::bf16).to_values();
    Context ctx(Device::cuda());
    const auto pass = [&](Layer& layer, DType storage) {
      Tensor x_t = Tensor::from_values(x, c.input, storage, Device::cuda());
      Tensor y_t(y_shape, storage, Device::cuda());
      Tensor dy_t = Tensor::from_values(dy, y_shape, storage, Device::cuda());
      Tensor dx_t(c.input, storage, Device::cuda());
      for (Parameter* p : layer.parameters()) p->grad.fill_zero();
      layer.forward(ctx, {&x_t}, {&y_t});
      layer.backward(ctx, {&x_t}, {&y_t}, {&dy_t}, {&dx_t});
      ctx.synchronize();
      Results r{y_t.to_values(), dx_t.to_values(), {}};
      for (Parameter* p : layer.parameters()) r.parameter_grads[p->name] = p->grad.to_values();
      return r;
    };
    const Results expected = pass(*f32, DType::f32);
    const Results actual = pass(*bf16, DType::bf16);
    const auto rounded = [&](const std::vector<double>& values, const Shape& shape) {
      return Tensor::from_values(values, shape, DType::bf16).to_values();
    };
    EXPECT_EQ(rounded(expected.output, y_shape), actual.output) << describe(c);
    EXPECT_EQ(rounded(expected.input_grad, c.input), actual.input_grad) << describe(c);
    // The bias gradient's block partials meet in atomic adds, in any order.
    for (const auto& [name, grad] : expected.parameter_grads)
      expect_near_all(grad, actual.parameter_grads.at(name), 1e-5, describe(c) + " " + name);
  }
}

// The fused activation (Net::set_activation_fusion) applies after the bias
// on the grouped passes too: forward with a fused LeakyReLU equals
// LeakyReLU of the plain forward, and applies it in that call alone.
TEST(ConvGroups, ForwardAppliesFusedActivation) {
  std::mt19937_64 rng(4);
  for (const Case& c : cases()) {
    auto layer = make_layer(c, DType::f64, Device::cpu());
    const Shape y_shape = layer->output_shapes({c.input})[0];
    Context ctx;
    Tensor x = Tensor::from_values(random_vector(shape_numel(c.input), rng), c.input, DType::f64);
    Tensor plain(y_shape, DType::f64), fused(y_shape, DType::f64);
    layer->forward(ctx, {&x}, {&plain});
    ForwardOptions leaky;
    leaky.output_activation.active = true;
    leaky.output_activation.negative_slope = 0.25;
    layer->forward(ctx, {&x}, {&fused}, leaky);
    std::vector<double> expected = plain.to_values();
    for (double& v : expected) v = v > 0 ? v : 0.25 * v;
    expect_near_all(expected, fused.to_values(), 0, describe(c));
    // The activation was given with that call only: the next plain call is plain again.
    Tensor again(y_shape, DType::f64);
    layer->forward(ctx, {&x}, {&again});
    EXPECT_EQ(again.to_values(), plain.to_values()) << describe(c);
  }
}

std::string config_error(const std::string& type, const json& params) {
  return testing::config_error_of([&] { registry.create(type, "c", params); });
}

std::string shape_error(const std::string& type, const json& params, const Shape& input) {
  return testing::shape_error_of([&] { registry.create(type, "c", params)->output_shapes({input}); });
}

TEST(ConvGroups, ErrorsNameTheCulprit) {
  for (const std::string type : {"Conv2d", "ConvTranspose2d"}) {
    const std::string groups_error = config_error(type, {{"out_channels", 6}, {"kernel", 3}, {"groups", 4}});
    EXPECT_TRUE(testing::contains(groups_error, "parameter 'groups'")) << groups_error;
    EXPECT_TRUE(testing::contains(groups_error,
                                  "parameter 'groups' must divide out_channels (6) and the input's channels, got 4"))
        << groups_error;
    EXPECT_TRUE(testing::contains(config_error(type, {{"out_channels", 6}, {"kernel", 3}, {"groups", 0}}),
                                  "parameter 'groups' must be in [1, 65536], got 0"));
    EXPECT_TRUE(testing::contains(config_error(type, {{"out_channels", 6}, {"kernel", 3}, {"dilation", 0}}),
                                  "parameter 'dilation' must be in [1, 4096], got 0"));
    const std::string channels_error =
        shape_error(type, {{"out_channels", 6}, {"kernel", 3}, {"groups", 3}}, {1, 4, 8, 8});
    EXPECT_TRUE(testing::contains(channels_error, "input [1, 4, 8, 8] has 4 channels: groups (3) must divide both "
                                                  "the input's channels and out_channels (6)"))
        << channels_error;
  }
  // The input's channels against the grouped weight, once it exists.
  const Case c{"Conv2d", {{"out_channels", 6}, {"kernel", 3}, {"groups", 2}}, {1, 4, 8, 8}};
  auto layer = make_layer(c, DType::f64, Device::cpu());
  const std::string weight_error = testing::shape_error_of([&] { layer->output_shapes({{1, 8, 8, 8}}); });
  EXPECT_TRUE(testing::contains(weight_error, "input [1, 8, 8, 8] has 8 channels but weight [6, 2, 3, 3] expects 4"))
      << weight_error;
  // A dilated kernel reaches d(k - 1) + 1 pixels.
  const std::string small = shape_error("Conv2d", {{"out_channels", 2}, {"kernel", 3}, {"dilation", 3}}, {1, 2, 6, 9});
  EXPECT_TRUE(testing::contains(small, "is smaller than the 3x3 kernel at dilation 3 (7x7)")) << small;
  const std::string empty = shape_error(
      "ConvTranspose2d", {{"out_channels", 2}, {"kernel", 3}, {"padding", 3}, {"dilation", 2}}, {1, 2, 1, 8});
  EXPECT_TRUE(testing::contains(empty, "input [1, 2, 1, 8] gives an empty output [1, 2, -1, 6]: (H - 1)*stride - "
                                       "2*padding + dilation*(kernel - 1) + 1 + output_padding must be >= 1"))
      << empty;
  // output_padding < max(stride, dilation), as PyTorch.
  EXPECT_TRUE(testing::contains(
      config_error("ConvTranspose2d", {{"out_channels", 2}, {"kernel", 3}, {"dilation", 2}, {"output_padding", 2}}),
      "parameter 'output_padding' must be < stride (1) or dilation (2), got 2"));
  EXPECT_EQ(
      config_error("ConvTranspose2d", {{"out_channels", 2}, {"kernel", 3}, {"dilation", 2}, {"output_padding", 1}}),
      "(no ConfigError thrown)");
}

}  // namespace
}  // namespace plexus

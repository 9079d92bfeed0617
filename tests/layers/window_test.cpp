// WindowPartition and WindowReverse: Swin's window order, shift and heads
// on tiny examples worked out by hand, a reference that rolls the image and
// cuts it as Swin's window_partition does, exact round trips, gradient
// checks (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, the pair with
// AvgPool2d inside a Net at two image sizes, shape and parameter errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

std::vector<double> random_values(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(count);
  for (double& value : values) value = uniform(rng);
  return values;
}

std::vector<double> partition(const nlohmann::json& params, const std::vector<double>& values, const Shape& shape,
                              Device device = Device::cpu(), DType dtype = DType::f64) {
  auto layer = registry.create("WindowPartition", "wp", params);
  Context ctx(device);
  Tensor x = Tensor::from_values(values, shape, dtype, device);
  Tensor y(layer->output_shapes({shape})[0], dtype, device);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

std::vector<double> reverse(const nlohmann::json& params, const std::vector<double>& values, const Shape& shape,
                            const Shape& reference_shape, Device device = Device::cpu(), DType dtype = DType::f64) {
  auto layer = registry.create("WindowReverse", "wr", params);
  Context ctx(device);
  Tensor windows = Tensor::from_values(values, shape, dtype, device);
  Tensor reference(reference_shape, dtype, device);
  Tensor y(layer->output_shapes({shape, reference_shape})[0], dtype, device);
  layer->forward(ctx, {&windows, &reference}, {&y});
  return y.to_values();
}

std::vector<double> iota(std::size_t count) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i);
  return values;
}

// x = 0..15 as a 4x4 image, window 2: windows in row-major order of windows,
// each the 2x2 block in row-major order: [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]].
TEST(WindowPartition, FourWindowsByHand) {
  EXPECT_EQ(partition({{"window", 2}}, iota(16), {1, 1, 4, 4}),
            (std::vector<double>{0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15}));
}

// torch.roll(x, (-1, -1)) of the same image is x[(r + 1) % 4, (c + 1) % 4]
// at (r, c): rows 1, 2, 3, 0 of x, each starting at its column 1. Its first
// window is x[1, 1], x[1, 2], x[2, 1], x[2, 2] = 5, 6, 9, 10; the last one
// wraps both ways: x[3, 3], x[3, 0], x[0, 3], x[0, 0] = 15, 12, 3, 0.
TEST(WindowPartition, ShiftedWindowsByHand) {
  EXPECT_EQ(partition({{"window", 2}, {"shift", 1}}, iota(16), {1, 1, 4, 4}),
            (std::vector<double>{5, 6, 9, 10, 7, 4, 11, 8, 13, 14, 1, 2, 15, 12, 3, 0}));
}

// Four channels in two heads of two, one 2x2 window, x[c, h, w] = 100c + 10h + w:
// windows[0, g, t, d] = x[2g + d, t / 2, t % 2], channels innermost.
TEST(WindowPartition, HeadsTakeConsecutiveChannelsByHand) {
  std::vector<double> x;
  for (int c = 0; c < 4; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 2; ++w) x.push_back(100 * c + 10 * h + w);
  auto layer = registry.create("WindowPartition", "wp", {{"window", 2}, {"heads", 2}});
  EXPECT_EQ(layer->output_shapes({{1, 4, 2, 2}})[0], (Shape{1, 2, 4, 2}));
  EXPECT_EQ(
      partition({{"window", 2}, {"heads", 2}}, x, {1, 4, 2, 2}),
      (std::vector<double>{0, 100, 1, 101, 10, 110, 11, 111, /* head 1 */ 200, 300, 201, 301, 210, 310, 211, 311}));
}

// One head: [N, C, H, W] -> [N * (H/w) * (W/w), 1, w*w, C].
TEST(WindowPartition, OutputShape) {
  auto layer = registry.create("WindowPartition", "wp", {{"window", 8}, {"shift", 4}});
  EXPECT_EQ(layer->output_shapes({{2, 96, 16, 24}})[0], (Shape{2 * 2 * 3, 1, 64, 96}));
  auto reverse_layer = registry.create("WindowReverse", "wr", {{"window", 8}, {"shift", 4}});
  EXPECT_EQ(reverse_layer->output_shapes({{12, 1, 64, 96}, {2, 96, 16, 24}})[0], (Shape{2, 96, 16, 24}));
}

// Swin's recipe, written separately: roll the image by -s (shifted[r, c] =
// x[(r + s) % H, (c + s) % W]), move channels last, cut into w x w windows
// in (n, a, b) order, then split the channels into heads.
std::vector<double> swin_reference(const std::vector<double>& x, const Shape& shape, std::int64_t w, std::int64_t s,
                                   std::int64_t heads) {
  const std::int64_t batch = shape[0], channels = shape[1], height = shape[2], width = shape[3];
  const std::int64_t depth = channels / heads;
  auto shifted_channels_last = [&](std::int64_t n, std::int64_t r, std::int64_t c, std::int64_t k) {
    return x[((n * channels + k) * height + (r + s) % height) * width + (c + s) % width];
  };
  std::vector<double> windows;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t a = 0; a < height / w; ++a)
      for (std::int64_t b = 0; b < width / w; ++b)
        for (std::int64_t g = 0; g < heads; ++g)
          for (std::int64_t t = 0; t < w * w; ++t)
            for (std::int64_t d = 0; d < depth; ++d)
              windows.push_back(shifted_channels_last(n, a * w + t / w, b * w + t % w, g * depth + d));
  return windows;
}

TEST(WindowPartition, MatchesSwinsRollAndCut) {
  const Shape shape{2, 6, 6, 9};
  const std::vector<double> x = random_values(shape_numel(shape), 5);
  for (std::int64_t shift : {0, 1, 2})
    for (std::int64_t heads : {1, 3}) {
      SCOPED_TRACE("shift " + std::to_string(shift) + ", heads " + std::to_string(heads));
      EXPECT_EQ(partition({{"window", 3}, {"shift", shift}, {"heads", heads}}, x, shape),
                swin_reference(x, shape, 3, shift, heads));
    }
}

// Reverse(Partition(x)) == x and Partition(Reverse(windows)) == windows, exactly.
TEST(WindowReverse, UndoesWindowPartitionExactly) {
  const Shape shape{2, 4, 8, 12};
  const std::vector<double> x = random_values(shape_numel(shape), 7);
  for (std::int64_t shift : {0, 2, 3})
    for (std::int64_t heads : {1, 2, 4}) {
      SCOPED_TRACE("shift " + std::to_string(shift) + ", heads " + std::to_string(heads));
      nlohmann::json params = {{"window", 4}, {"shift", shift}};
      nlohmann::json partition_params = params;
      partition_params["heads"] = heads;
      const Shape windows_shape{2 * 2 * 3, heads, 16, 4 / heads};
      const std::vector<double> windows = partition(partition_params, x, shape);
      EXPECT_NE(windows, x);
      EXPECT_EQ(reverse(params, windows, windows_shape, shape), x);
      const std::vector<double> other = random_values(windows.size(), 8);
      EXPECT_EQ(partition(partition_params, reverse(params, other, windows_shape, shape), shape), other);
    }
}

// Windows 0..15 back into a 4x4 image, shift 1: the inverse of ShiftedWindowsByHand's map,
// x[(a*2 + i + 1) % 4, (b*2 + j + 1) % 4] = windows[a*2 + b, i*2 + j].
TEST(WindowReverse, ShiftedImageByHand) {
  EXPECT_EQ(reverse({{"window", 2}, {"shift", 1}}, iota(16), {4, 1, 4, 1}, {1, 1, 4, 4}),
            (std::vector<double>{15, 10, 11, 14, 5, 0, 1, 4, 7, 2, 3, 6, 13, 8, 9, 12}));
}

// The pair inside a Net, as a windowed-attention block uses it: the
// reference is the partitioned blob itself, the size comes from the image.
const char* kWindowSpec = R"({
  "name": "windows",
  "inputs": ["image"],
  "nodes": [
    {"name": "stem", "type": "Conv2d", "inputs": ["image"], "outputs": ["h"],
     "params": {"out_channels": 4, "kernel": 3, "stride": 1, "padding": 1}},
    {"name": "cut", "type": "WindowPartition", "inputs": ["h"], "outputs": ["h_windows"],
     "params": {"window": 4, "shift": 2, "heads": 2}},
    {"name": "paste", "type": "WindowReverse", "inputs": ["h_windows", "h"], "outputs": ["r"],
     "params": {"window": 4, "shift": 2}},
    {"name": "pool", "type": "AvgPool2d", "inputs": ["r"], "outputs": ["p"],
     "params": {"kernel": 3, "stride": 1, "padding": 1}},
    {"name": "head", "type": "Conv2d", "inputs": ["p"], "outputs": ["x_hat"],
     "params": {"out_channels": 3, "kernel": 1, "stride": 1, "padding": 0}},
    {"name": "distortion", "type": "MSELoss", "inputs": ["x_hat", "image"], "outputs": ["mse"]}
  ]
})";

TEST(WindowReverse, InANetTheStemWeightGradientMatchesCentralDifferences) {
  for (std::int64_t side : {8, 12}) {
    SCOPED_TRACE("image side " + std::to_string(side));
    const Shape image{2, 3, side, side};
    Net net(ModelSpec::from_text(kWindowSpec, "windows.json"), registry, {{"image", image}}, DType::f64, Device::cpu(),
            21);
    Context ctx;
    net.input("image").copy_from(Tensor::from_values(random_values(shape_numel(image), 3), image, DType::f64));
    auto loss = [&] {
      net.forward(ctx);
      return net.scalar("mse");
    };
    loss();
    const std::int64_t windows = 2 * (side / 4) * (side / 4);
    EXPECT_EQ(net.blob("h_windows").shape(), (Shape{windows, 2, 16, 2}));
    EXPECT_EQ(net.blob("r").to_values(), net.blob("h").to_values());
    net.zero_grad();
    net.backward(ctx, {{"mse", 1.0}});
    Parameter& weight = net.layer("stem").parameter("weight");
    const std::vector<double> analytic = weight.grad.to_values(), values = weight.value.to_values();
    const double step = 1e-5;
    for (std::size_t k : {std::size_t{0}, values.size() / 2, values.size() - 1}) {
      auto loss_at = [&](double value) {
        std::vector<double> moved = values;
        moved[k] = value;
        weight.value.copy_from(Tensor::from_values(moved, weight.value.shape(), DType::f64));
        return loss();
      };
      const double numeric = (loss_at(values[k] + step) - loss_at(values[k] - step)) / (2 * step);
      EXPECT_NEAR(analytic[k], numeric, 1e-6 * std::max({std::abs(analytic[k]), std::abs(numeric), 1.0})) << k;
      weight.value.copy_from(Tensor::from_values(values, weight.value.shape(), DType::f64));
    }
  }
}

TEST(WindowPartition, GradientsCpu) {
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "WindowPartition", {{"window", 2}, {"shift", 1}, {"heads", 3}}, {{2, 6, 4, 6}})));
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "WindowPartition", {{"window", 3}}, {{1, 2, 3, 6}})));
}

TEST(WindowReverse, GradientsCpu) {
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "WindowReverse", {{"window", 2}, {"shift", 1}}, {{12, 3, 4, 2}, {2, 6, 4, 6}})));
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "WindowReverse", {{"window", 3}}, {{2, 1, 9, 2}, {1, 2, 3, 6}})));
}

TEST(WindowReverse, ReferenceGetsNoGradient) {
  auto layer = registry.create("WindowReverse", "wr", {{"window", 2}});
  EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(0));
  EXPECT_FALSE(layer->traits(Device::cpu()).input_is_differentiable(1));
}

TEST(WindowPartition, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(check_gradients(
      registry, "WindowPartition", {{"window", 2}, {"shift", 1}, {"heads", 3}}, {{2, 6, 4, 6}}, Device::cuda())));
}

TEST(WindowReverse, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "WindowReverse", {{"window", 2}, {"shift", 1}},
                                                       {{12, 3, 4, 2}, {2, 6, 4, 6}}, Device::cuda())));
}

// Sizes that leave partial 32 x 32 tiles in both channels and columns.
TEST(WindowPartition, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "WindowPartition", {{"window", 8}, {"shift", 4}, {"heads", 3}}, {{2, 72, 16, 40}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "WindowPartition", {{"window", 7}, {"shift", 3}}, {{1, 40, 14, 35}}, f64)));
}

TEST(WindowReverse, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "WindowReverse", {{"window", 8}, {"shift", 4}}, {{20, 3, 64, 24}, {2, 72, 16, 40}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "WindowReverse", {{"window", 7}}, {{10, 1, 49, 40}, {1, 40, 14, 35}}, f64)));
}

// The CUDA copies are exact too: a round trip on the GPU gives x back bit for bit, in f32 and f64.
TEST(WindowReverse, UndoesWindowPartitionExactlyCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Shape shape{2, 40, 16, 24};
  const std::vector<double> x = random_values(shape_numel(shape), 9);
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::vector<double> stored = Tensor::from_values(x, shape, dtype).to_values();
    const std::vector<double> windows =
        partition({{"window", 8}, {"shift", 3}, {"heads", 2}}, x, shape, Device::cuda(), dtype);
    EXPECT_EQ(windows, partition({{"window", 8}, {"shift", 3}, {"heads", 2}}, stored, shape, Device::cpu(), dtype));
    EXPECT_EQ(reverse({{"window", 8}, {"shift", 3}}, windows, {12, 2, 64, 20}, shape, Device::cuda(), dtype), stored);
  }
}

// One forward and one backward on CUDA with the given storage for the
// windows side and the image side (and their gradients); returns the
// forward's output and the backward's input gradient.
struct CopyResult {
  std::vector<double> output, input_grad;
};
CopyResult run_cuda(const std::string& type, const nlohmann::json& params, const std::vector<Shape>& shapes,
                    const std::vector<double>& x, const std::vector<double>& dy, DType input_dtype,
                    DType output_dtype) {
  auto layer = registry.create(type, "w", params);
  const Shape output_shape = layer->output_shapes(shapes)[0];
  Context ctx(Device::cuda());
  std::vector<Tensor> inputs;
  for (const Shape& shape : shapes)
    inputs.push_back(Tensor::from_values(inputs.empty() ? x : std::vector<double>(shape_numel(shape), 0.0), shape,
                                         input_dtype, Device::cuda()));
  ConstTensors in;
  for (const Tensor& input : inputs) in.push_back(&input);
  Tensor y(output_shape, output_dtype, Device::cuda());
  Tensor output_grad = Tensor::from_values(dy, output_shape, output_dtype, Device::cuda());
  Tensor input_grad(shapes[0], input_dtype, Device::cuda());
  MutableTensors input_grads{&input_grad};
  if (shapes.size() > 1) input_grads.push_back(nullptr);
  layer->forward(ctx, in, {&y});
  layer->backward(ctx, in, {&y}, {&output_grad}, input_grads);
  return {y.to_values(), input_grad.to_values()};
}

// With bf16 storage the copies stay copies: each output and gradient is the
// f32 one, rounded to bf16 where it is stored in bf16 (exact when both sides are bf16).
TEST(WindowPartition, Bf16StorageCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(12);
  const Shape image{2, 40, 8, 24};
  const Shape windows{2 * 1 * 3, 2, 64, 20};
  const std::vector<double> x = testing::bf16_values(shape_numel(image), -2, 2, rng);
  const std::vector<double> dy = testing::bf16_values(shape_numel(windows), -2, 2, rng);
  const nlohmann::json partition_params = {{"window", 8}, {"shift", 3}, {"heads", 2}};
  const nlohmann::json reverse_params = {{"window", 8}, {"shift", 3}};
  const CopyResult partition_f32 =
      run_cuda("WindowPartition", partition_params, {image}, x, dy, DType::f32, DType::f32);
  const CopyResult reverse_f32 =
      run_cuda("WindowReverse", reverse_params, {windows, image}, dy, x, DType::f32, DType::f32);
  for (DType image_dtype : {DType::f32, DType::bf16})
    for (DType windows_dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string("image ") + dtype_name(image_dtype) + ", windows " + dtype_name(windows_dtype));
      const CopyResult partition_result =
          run_cuda("WindowPartition", partition_params, {image}, x, dy, image_dtype, windows_dtype);
      testing::expect_stored(partition_f32.output, partition_result.output, windows_dtype, "windows");
      testing::expect_stored(partition_f32.input_grad, partition_result.input_grad, image_dtype, "image gradient");
      const CopyResult reverse_result =
          run_cuda("WindowReverse", reverse_params, {windows, image}, dy, x, windows_dtype, image_dtype);
      testing::expect_stored(reverse_f32.output, reverse_result.output, image_dtype, "image");
      testing::expect_stored(reverse_f32.input_grad, reverse_result.input_grad, windows_dtype, "windows gradient");
    }
  EXPECT_EQ(partition_f32.output, partition(partition_params, x, image));
}

TEST(WindowPartition, Bf16RefusedOnTheCpuByName) {
  auto layer = registry.create("WindowPartition", "cut", {{"window", 2}});
  EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16);
  testing::expect_cpu_refuses_bf16_input(*layer, "cut", {1, 2, 4, 4});
}

TEST(WindowPartition, RejectsSizesNotMultiplesOfTheWindow) {
  auto layer = registry.create("WindowPartition", "win", {{"window", 8}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{1, 32, 16, 20}}); });
  EXPECT_TRUE(testing::contains(message, "node 'win' (WindowPartition): input [1, 32, 16, 20] has height 16 and "
                                         "width 20, which must both be multiples of window 8"))
      << message;
}

TEST(WindowPartition, RejectsChannelsNotAMultipleOfHeads) {
  auto layer = registry.create("WindowPartition", "win", {{"window", 2}, {"heads", 4}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{1, 6, 4, 4}}); });
  EXPECT_TRUE(testing::contains(
      message, "node 'win' (WindowPartition): input [1, 6, 4, 4] has 6 channels, not a multiple of heads 4"))
      << message;
}

TEST(WindowPartition, RejectsInputsThatAreNotNCHW) {
  auto layer = registry.create("WindowPartition", "win", {{"window", 2}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{4, 4, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'win' (WindowPartition): input is [4, 4, 4]; WindowPartition needs "
                                         "[N, C, H, W]"))
      << message;
}

TEST(WindowPartition, RejectsBadParams) {
  for (const char* type : {"WindowPartition", "WindowReverse"}) {
    std::string shift = testing::config_error_of([&] { registry.create(type, "win", {{"window", 4}, {"shift", 4}}); });
    EXPECT_TRUE(testing::contains(shift, "node 'win' (" + std::string(type) + ")")) << shift;
    EXPECT_TRUE(testing::contains(shift, "shift 4 must be smaller than window 4")) << shift;
    std::string zero = testing::config_error_of([&] { registry.create(type, "win", {{"window", 0}}); });
    EXPECT_TRUE(testing::contains(zero, "window")) << zero;
    std::string missing = testing::config_error_of([&] { registry.create(type, "win", nlohmann::json::object()); });
    EXPECT_TRUE(testing::contains(missing, "window")) << missing;
  }
  std::string heads = testing::config_error_of([] {
    registry.create("WindowPartition", "win", {{"window", 2}, {"heads", 0}});
  });
  EXPECT_TRUE(testing::contains(heads, "heads")) << heads;
  std::string unknown = testing::config_error_of([] {
    registry.create("WindowReverse", "win", {{"window", 2}, {"heads", 2}});
  });
  EXPECT_TRUE(testing::contains(unknown, "heads")) << unknown;
}

TEST(WindowReverse, RejectsWindowsThatDoNotFitTheReference) {
  auto layer = registry.create("WindowReverse", "back", {{"window", 4}});
  std::string count = testing::shape_error_of([&] { layer->output_shapes({{4, 1, 16, 8}, {1, 8, 8, 12}}); });
  EXPECT_TRUE(testing::contains(count, "node 'back' (WindowReverse): windows [4, 1, 16, 8] do not fit the reference "
                                       "[1, 8, 8, 12] with window 4: expected [6, 1, 16, 8]"))
      << count;
  std::string channels = testing::shape_error_of([&] { layer->output_shapes({{6, 2, 16, 8}, {1, 8, 8, 12}}); });
  EXPECT_TRUE(testing::contains(channels, "windows [6, 2, 16, 8] hold 2 heads of 8 channels, but the reference "
                                          "[1, 8, 8, 12] has 8 channels"))
      << channels;
  std::string size = testing::shape_error_of([&] { layer->output_shapes({{6, 1, 16, 8}, {1, 8, 8, 10}}); });
  EXPECT_TRUE(testing::contains(size, "reference [1, 8, 8, 10] has height 8 and width 10, which must both be "
                                      "multiples of window 4"))
      << size;
  std::string one = testing::shape_error_of([&] { layer->output_shapes({{6, 1, 16, 8}}); });
  EXPECT_TRUE(testing::contains(one, "takes 2 inputs")) << one;
  std::string rank = testing::shape_error_of([&] { layer->output_shapes({{6, 16, 8}, {1, 8, 8, 12}}); });
  EXPECT_TRUE(testing::contains(rank, "input 0 is [6, 16, 8]; WindowReverse needs [B, heads, w*w, D]")) << rank;
}

}  // namespace
}  // namespace plexus

// AvgPool2d: PyTorch's AvgPool2d (count_include_pad) on tiny examples worked
// out by hand, forward and backward, gradient checks over kernel, stride and
// padding (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape and parameter
// errors.
#include <gtest/gtest.h>

#include <random>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

std::vector<double> pooled(const nlohmann::json& params, const std::vector<double>& values, const Shape& shape) {
  auto layer = registry.create("AvgPool2d", "pool", params);
  Context ctx;
  Tensor x = Tensor::from_values(values, shape, DType::f64);
  Tensor y(layer->output_shapes({shape})[0], DType::f64);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

// dL/dx for dL/dy = dy_values (x's values do not matter to an average's gradient).
std::vector<double> input_gradient(const nlohmann::json& params, const std::vector<double>& dy_values,
                                   const Shape& shape) {
  auto layer = registry.create("AvgPool2d", "pool", params);
  Context ctx;
  Tensor x(shape, DType::f64);
  Tensor y(layer->output_shapes({shape})[0], DType::f64);
  Tensor dy = Tensor::from_values(dy_values, y.shape(), DType::f64);
  Tensor dx = Tensor::from_values(std::vector<double>(shape_numel(shape), 7.0), shape, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  return dx.to_values();
}

// [[1, 2], [3, 4]] with a 2x2 kernel: (1 + 2 + 3 + 4) / 4.
TEST(AvgPool2d, OneWindowByHand) {
  EXPECT_EQ(pooled({{"kernel", 2}}, {1, 2, 3, 4}, {1, 1, 2, 2}), (std::vector<double>{2.5}));
}

// Stride defaults to the kernel: a 4x4 image of 0..15 gives the means of its four 2x2 blocks.
TEST(AvgPool2d, StrideDefaultsToKernelByHand) {
  std::vector<double> x(16);
  for (int i = 0; i < 16; ++i) x[i] = i;
  EXPECT_EQ(pooled({{"kernel", 2}}, x, {1, 1, 4, 4}), (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
}

// Padding 1 around [[1, 2], [3, 4]], kernel 2, stride 1: a 3x3 output, each
// window's sum over 4 whatever the number of real pixels in it
// (count_include_pad): the corner windows hold one pixel, so 1/4, 2/4, 3/4, 4/4.
TEST(AvgPool2d, PaddingCountsInTheDivisorByHand) {
  EXPECT_EQ(pooled({{"kernel", 2}, {"stride", 1}, {"padding", 1}}, {1, 2, 3, 4}, {1, 1, 2, 2}),
            (std::vector<double>{0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0}));
}

// Two channels are pooled apart: channel 1 is channel 0 plus 10.
TEST(AvgPool2d, ChannelsArePooledApart) {
  EXPECT_EQ(pooled({{"kernel", 2}}, {1, 2, 3, 4, 11, 12, 13, 14}, {1, 2, 2, 2}), (std::vector<double>{2.5, 12.5}));
}

// Kernel 2, stride 1 on a 3x3 input, dy = [[1, 2], [3, 4]]: each dx is the
// sum of the dy whose windows hold it, over 4; the centre is in all four.
TEST(AvgPool2d, BackwardByHand) {
  EXPECT_EQ(input_gradient({{"kernel", 2}, {"stride", 1}}, {1, 2, 3, 4}, {1, 1, 3, 3}),
            (std::vector<double>{0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0}));
}

// Kernel 1, stride 2: pixels between windows get a zero gradient (written, not left as they were).
TEST(AvgPool2d, BackwardZeroBetweenWindowsByHand) {
  EXPECT_EQ(pooled({{"kernel", 1}, {"stride", 2}}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}),
            (std::vector<double>{1, 3, 7, 9}));
  EXPECT_EQ(input_gradient({{"kernel", 1}, {"stride", 2}}, {1, 2, 3, 4}, {1, 1, 3, 3}),
            (std::vector<double>{1, 0, 2, 0, 0, 0, 3, 0, 4}));
}

// Output size floor((H + 2p - k) / s) + 1: (7 + 2 - 3) / 2 + 1 = 4 and (8 + 2 - 3) / 2 + 1 = 4; with
// kernel 2 (stride 2) a 7-wide input gives 3 columns, its last one in no window.
TEST(AvgPool2d, OutputShape) {
  auto layer = registry.create("AvgPool2d", "pool", {{"kernel", 3}, {"stride", 2}, {"padding", 1}});
  EXPECT_EQ(layer->output_shapes({{2, 5, 7, 8}})[0], (Shape{2, 5, 4, 4}));
  auto halving = registry.create("AvgPool2d", "pool", {{"kernel", 2}});
  EXPECT_EQ(halving->output_shapes({{1, 3, 6, 7}})[0], (Shape{1, 3, 3, 3}));
}

const std::vector<nlohmann::json> kPoolings = {{{"kernel", 2}},
                                               {{"kernel", 3}, {"stride", 2}, {"padding", 1}},
                                               {{"kernel", 3}, {"stride", 1}, {"padding", 1}},
                                               {{"kernel", 2}, {"stride", 3}},
                                               {{"kernel", 4}, {"stride", 2}, {"padding", 2}}};

TEST(AvgPool2d, GradientsCpu) {
  for (const auto& params : kPoolings) {
    SCOPED_TRACE(params.dump());
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "AvgPool2d", params, {{2, 3, 7, 8}})));
  }
}

TEST(AvgPool2d, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const auto& params : kPoolings) {
    SCOPED_TRACE(params.dump());
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "AvgPool2d", params, {{2, 3, 7, 8}}, Device::cuda())));
  }
}

TEST(AvgPool2d, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions f64;
  f64.dtype = DType::f64;
  for (const auto& params : kPoolings) {
    SCOPED_TRACE(params.dump());
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "AvgPool2d", params, {{4, 16, 33, 31}})));
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "AvgPool2d", params, {{2, 5, 17, 20}}, f64)));
  }
}

// y and dx on CUDA with x, dx stored in `input_dtype` and y, dy in `output_dtype`.
std::pair<std::vector<double>, std::vector<double>> run_cuda(const nlohmann::json& params, const Shape& shape,
                                                             const std::vector<double>& x,
                                                             const std::vector<double>& dy, DType input_dtype,
                                                             DType output_dtype) {
  auto layer = registry.create("AvgPool2d", "pool", params);
  const Shape output_shape = layer->output_shapes({shape})[0];
  Context ctx(Device::cuda());
  Tensor input = Tensor::from_values(x, shape, input_dtype, Device::cuda());
  Tensor y(output_shape, output_dtype, Device::cuda());
  Tensor output_grad = Tensor::from_values(dy, output_shape, output_dtype, Device::cuda());
  Tensor input_grad(shape, input_dtype, Device::cuda());
  layer->forward(ctx, {&input}, {&y});
  layer->backward(ctx, {&input}, {&y}, {&output_grad}, {&input_grad});
  return {y.to_values(), input_grad.to_values()};
}

// With bf16 storage the sums stay f32: y and dx are the all-f32 pass's, rounded to bf16 where stored in bf16.
TEST(AvgPool2d, Bf16StorageGivesTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(13);
  const Shape shape{2, 3, 9, 11};
  for (const auto& params : kPoolings) {
    SCOPED_TRACE(params.dump());
    const Shape output_shape = registry.create("AvgPool2d", "pool", params)->output_shapes({shape})[0];
    const std::vector<double> x = testing::bf16_values(shape_numel(shape), -2, 2, rng);
    const std::vector<double> dy = testing::bf16_values(shape_numel(output_shape), -2, 2, rng);
    const auto reference = run_cuda(params, shape, x, dy, DType::f32, DType::f32);
    for (DType input_dtype : {DType::f32, DType::bf16})
      for (DType output_dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string("x ") + dtype_name(input_dtype) + ", y " + dtype_name(output_dtype));
        const auto stored = run_cuda(params, shape, x, dy, input_dtype, output_dtype);
        testing::expect_stored(reference.first, stored.first, output_dtype, "y");
        testing::expect_stored(reference.second, stored.second, input_dtype, "dx");
      }
  }
}

TEST(AvgPool2d, Bf16RefusedOnTheCpuByName) {
  auto layer = registry.create("AvgPool2d", "pool", {{"kernel", 2}});
  EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16);
  testing::expect_cpu_refuses_bf16_input(*layer, "pool", {1, 2, 4, 4});
}

TEST(AvgPool2d, RejectsInputsSmallerThanTheKernel) {
  auto layer = registry.create("AvgPool2d", "pool", {{"kernel", 5}, {"padding", 1}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{1, 2, 2, 8}}); });
  EXPECT_TRUE(testing::contains(message, "node 'pool' (AvgPool2d): input [1, 2, 2, 8] with padding 1 is smaller than "
                                         "the 5x5 kernel: the output would be empty"))
      << message;
}

TEST(AvgPool2d, RejectsInputsThatAreNotNCHW) {
  auto layer = registry.create("AvgPool2d", "pool", {{"kernel", 2}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{4, 4, 4}}); });
  EXPECT_TRUE(testing::contains(message, "node 'pool' (AvgPool2d): input is [4, 4, 4]; AvgPool2d needs [N, C, H, W]"))
      << message;
}

TEST(AvgPool2d, RejectsBadParams) {
  std::string padding = testing::config_error_of([] {
    registry.create("AvgPool2d", "pool", {{"kernel", 3}, {"padding", 2}});
  });
  EXPECT_TRUE(testing::contains(padding, "node 'pool' (AvgPool2d)")) << padding;
  EXPECT_TRUE(testing::contains(padding, "padding 2 must be at most half the kernel 3 (1)")) << padding;
  std::string stride = testing::config_error_of([] {
    registry.create("AvgPool2d", "pool", {{"kernel", 3}, {"stride", 0}});
  });
  EXPECT_TRUE(testing::contains(stride, "stride")) << stride;
  std::string kernel = testing::config_error_of([] { registry.create("AvgPool2d", "pool", {{"kernel", 0}}); });
  EXPECT_TRUE(testing::contains(kernel, "kernel")) << kernel;
  std::string missing =
      testing::config_error_of([] { registry.create("AvgPool2d", "pool", nlohmann::json::object()); });
  EXPECT_TRUE(testing::contains(missing, "kernel")) << missing;
}

}  // namespace
}  // namespace plexus

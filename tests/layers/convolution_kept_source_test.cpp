// A convolution keeps the NHWC bf16 copy of its input X from a training
// forward (or, for ConvTranspose2d, from its backward, where the input
// gradient copies the same tensor) to the weight gradient of the same step
// (implicit_gemm::KeptSource). The copy must serve only the X it was made
// from: a backward after a forward on other data, after an eval forward, or
// on new values in the same memory computes what a fresh layer computes from
// the tensors it is given. At bf16 products, on shapes the Hopper weight
// gradient takes (>= 64 channels, output rows of whole 16-pixel tiles); on
// another GPU the same passes run other kernels and must agree as well.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "layers/tensor_core_reference.h"
#include "plexus/builtin_layers.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

struct Case {
  std::string type;
  json params;
  Shape input;
};

// Conv2d 64 -> 64, 5x5 stride 2 onto 32x32; ConvTranspose2d 64 -> 64 from
// 32x32 onto 64x64 (its weight gradient is a 64x64 -> 32x32 correlation).
std::vector<Case> cases() {
  return {{"Conv2d", {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}, {2, 64, 64, 64}},
          {"ConvTranspose2d",
           {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
           {2, 64, 32, 32}}};
}

// A layer of the case with the parameters drawn from `seed` (the same for every layer made with it).
std::unique_ptr<Layer> make_layer(const Case& c, std::uint64_t seed) {
  auto layer = registry.create(c.type, "layer", c.params);
  layer->output_shapes({c.input});
  layer->create_parameters({c.input});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(DType::f32, Device::cuda(), rng);
  return layer;
}

struct Gradients {
  std::vector<double> input, weight;
};

// backward of `layer` on (x, y, dy) with the weight gradient from zero.
Gradients backward(Layer& layer, Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy) {
  Tensor dx(x.shape(), DType::f32, Device::cuda());
  for (Parameter* p : layer.parameters()) p->grad.fill_zero();
  layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  ctx.synchronize();
  return {dx.to_values(), layer.parameter("weight").grad.to_values()};
}

// What a fresh layer computes from x and dy: one forward, one backward.
Gradients fresh(const Case& c, const Tensor& x, const Tensor& dy) {
  Context ctx(Device::cuda());
  ctx.set_precision(Precision::bf16);
  auto layer = make_layer(c, 7);
  Tensor y(dy.shape(), DType::f32, Device::cuda());
  layer->forward(ctx, {&x}, {&y});
  return backward(*layer, ctx, x, y, dy);
}

void expect_same(const Gradients& got, const Gradients& expected, const std::string& what) {
  EXPECT_EQ(got.weight, expected.weight) << "weight gradient, " << what;
  EXPECT_EQ(got.input, expected.input) << "input gradient, " << what;
}

TEST(ConvolutionKeptSource, BackwardReadsTheTensorsItIsGivenCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : cases()) {
    std::mt19937_64 rng(11);
    auto probe = make_layer(c, 7);
    const Shape output = probe->output_shapes({c.input})[0];
    const auto values = [&](const Shape& shape) {
      const auto drawn = testing::uniform_values(static_cast<std::size_t>(shape_numel(shape)), rng);
      return Tensor::from_values(drawn, shape, DType::f32, Device::cuda());
    };
    const Tensor xa = values(c.input), xb = values(c.input), dya = values(output), dyb = values(output);
    const Gradients expected_a = fresh(c, xa, dya), expected_b = fresh(c, xb, dyb);

    Context ctx(Device::cuda());
    ctx.set_precision(Precision::bf16);
    auto layer = make_layer(c, 7);
    Tensor ya(output, DType::f32, Device::cuda()), yb(output, DType::f32, Device::cuda());

    // A forward on other data between the forward and the backward of xa.
    layer->forward(ctx, {&xa}, {&ya});
    layer->forward(ctx, {&xb}, {&yb});
    expect_same(backward(*layer, ctx, xa, ya, dya), expected_a, c.type + ": xa after a forward of xb");

    // An eval forward on other data in between.
    layer->forward(ctx, {&xa}, {&ya});
    ctx.set_training(false);
    layer->forward(ctx, {&xb}, {&yb});
    ctx.set_training(true);
    expect_same(backward(*layer, ctx, xa, ya, dya), expected_a, c.type + ": xa after an eval forward of xb");

    // New values in the memory of x and dy: each step's forward and
    // backward on what the tensors hold then.
    Tensor x = xa.clone(), dy = dya.clone();
    layer->forward(ctx, {&x}, {&ya});
    expect_same(backward(*layer, ctx, x, ya, dy), expected_a, c.type + ": first step");
    x.copy_from(xb);
    dy.copy_from(dyb);
    layer->forward(ctx, {&x}, {&yb});
    expect_same(backward(*layer, ctx, x, yb, dy), expected_b, c.type + ": second step, same memory");
  }
}

}  // namespace
}  // namespace plexus

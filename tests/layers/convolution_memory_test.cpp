// The convolution engine's memory, one section each:
//
// grown_scratch (convolution/scratch.h), the buffers every convolution of a
// context shares: grown when a caller needs more elements (or another
// dtype), never shrunk, a view of the caller's shape at the start, and every
// growth noted on the context (StepGraph records again after one).
//
// Conv2d and ConvTranspose2d told to discard their input
// (ForwardOptions::discard_input) give the memory of the rows they have read back
// to the system as they go: on inputs large enough to be mapped buffers
// (host_memory.h), with one and two images, strides 1 and 2, and 1, 2 and 3
// threads, the outputs must be bit-identical to those of a forward that
// keeps its input, and memory must have been given back.
//
// The convolutions of a context share their CUDA scratch (packed weights,
// NHWC copies, partial sums, im2col columns: Context::shared_state). A net
// of convolutions of different shapes, on the tensor-core engine (tf32,
// bf16) and on im2col + cuBLAS (f32), must compute on CUDA what it computes
// on the CPU, and the same again after a larger net on the same context has
// left its own data in every shared buffer (a pass must fill what it reads).
// Skipped without a GPU.
//
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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convolution/scratch.h"
#include "layers/tensor_core_reference.h"
#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/host_memory.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::layers::grown_scratch_test {
namespace {

TEST(GrownScratch, GrowsNeverShrinksAndNotesEachGrowth) {
  Context ctx;
  Tensor buffer;
  Tensor first = grown_scratch(ctx, buffer, {2, 3}, DType::f32);
  EXPECT_EQ(first.shape(), (Shape{2, 3}));
  EXPECT_EQ(buffer.numel(), 6);
  EXPECT_EQ(ctx.memory_generation(), 1u);
  const void* memory = buffer.raw_data();

  Tensor smaller = grown_scratch(ctx, buffer, {4}, DType::f32);  // fits: same memory, no growth
  EXPECT_EQ(smaller.shape(), (Shape{4}));
  EXPECT_EQ(smaller.raw_data(), memory);
  EXPECT_EQ(buffer.numel(), 6);
  EXPECT_EQ(ctx.memory_generation(), 1u);

  Tensor larger = grown_scratch(ctx, buffer, {3, 3}, DType::f32);
  EXPECT_EQ(larger.shape(), (Shape{3, 3}));
  EXPECT_EQ(buffer.numel(), 9);
  EXPECT_EQ(larger.raw_data(), buffer.raw_data());
  EXPECT_EQ(ctx.memory_generation(), 2u);

  Tensor wide = grown_scratch(ctx, buffer, {2}, DType::f64);  // another dtype: replaced
  EXPECT_EQ(wide.dtype(), DType::f64);
  EXPECT_EQ(buffer.dtype(), DType::f64);
  EXPECT_EQ(ctx.memory_generation(), 3u);

  // Writes through a view land in the buffer the next caller sees.
  wide.data<double>()[1] = 2.5;
  EXPECT_EQ(grown_scratch(ctx, buffer, {2}, DType::f64).to_values(), (std::vector<double>{0, 2.5}));
}

}  // namespace
}  // namespace plexus::layers::grown_scratch_test

namespace plexus::discard_test {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

struct ThreadCountGuard {
  ~ThreadCountGuard() { set_cpu_threads(0); }
};

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = uniform(rng);
  return Tensor::from_values(values, shape);
}

void expect_same_with_discard(const std::string& type, const json& params, const Shape& input_shape) {
  ASSERT_GE(shape_numel(input_shape) * sizeof(float), host_memory::kMappedHostBytes);
  auto layer = registry.create(type, "conv", params);
  const Shape output_shape = layer->output_shapes({input_shape})[0];
  layer->create_parameters({input_shape});
  std::mt19937_64 rng(3);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  const Tensor input = random_tensor(input_shape, 4);
  Context ctx;
  Tensor expected(output_shape);
  layer->forward(ctx, {&input}, {&expected});
  ThreadCountGuard guard;
  for (const int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    Tensor consumed = input.clone();
    Tensor actual(output_shape);
    const std::size_t before = host_memory::discarded_bytes();
    ForwardOptions discard;
    discard.discard_input = true;
    layer->forward(ctx, {&consumed}, {&actual}, discard);
    EXPECT_GT(host_memory::discarded_bytes() - before, consumed.nbytes() / 2) << type << " " << threads << " threads";
    ASSERT_EQ(std::memcmp(expected.raw_data(), actual.raw_data(), expected.nbytes()), 0)
        << type << " " << params.dump() << " " << shape_str(input_shape) << ", " << threads << " threads";
  }
}

TEST(ConvolutionDiscard, Conv2dStride1) {
  expect_same_with_discard("Conv2d", {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}, {1, 8, 1030, 1020});
}

TEST(ConvolutionDiscard, Conv2dStride2TwoImages) {
  expect_same_with_discard("Conv2d", {{"out_channels", 4}, {"kernel", 5}, {"stride", 2}, {"padding", 2}},
                           {2, 4, 1031, 1021});
}

TEST(ConvolutionDiscard, ConvTranspose2dStride2) {
  expect_same_with_discard("ConvTranspose2d",
                           {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
                           {1, 16, 700, 760});
}

TEST(ConvolutionDiscard, ConvTranspose2dStride1TwoImages) {
  expect_same_with_discard("ConvTranspose2d", {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}}, {2, 8, 530, 1010});
}

}  // namespace
}  // namespace plexus::discard_test

namespace plexus::shared_scratch_test {
namespace {

using nlohmann::json;

json conv(int out, int kernel, int stride) {
  return {{"out_channels", out}, {"kernel", kernel}, {"stride", stride}, {"padding", kernel / 2}};
}
json deconv(int out) {
  return {{"out_channels", out}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}};
}

// 3 -> 32 -> 48 -> 32 channels down to a quarter, then back up to 3: the
// few-channel passes next to the image and the engine's in between.
ModelSpec convolutions() {
  ModelSpec spec;
  spec.add_input("image")
      .add_node({"c0", "Conv2d", {"image"}, {"a0"}, conv(32, 5, 2)})
      .add_node({"r0", "ReLU", {"a0"}, {"b0"}, json::object()})
      .add_node({"c1", "Conv2d", {"b0"}, {"a1"}, conv(48, 3, 1)})
      .add_node({"r1", "ReLU", {"a1"}, {"b1"}, json::object()})
      .add_node({"c2", "Conv2d", {"b1"}, {"a2"}, conv(32, 5, 2)})
      .add_node({"t0", "ConvTranspose2d", {"a2"}, {"a3"}, deconv(32)})
      .add_node({"r2", "ReLU", {"a3"}, {"b3"}, json::object()})
      .add_node({"t1", "ConvTranspose2d", {"b3"}, {"x_hat"}, deconv(3)})
      .add_node({"mse", "MSELoss", {"x_hat", "image"}, {"loss"}, json::object()});
  return spec;
}

Tensor random_image(const Shape& shape, std::uint64_t seed, Device device) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = unit(rng);
  return Tensor::from_values(values, shape, DType::f32, device);
}

// The parameter gradients of one forward and backward.
std::vector<std::vector<double>> gradients(Net& net, Context& ctx) {
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"loss", 1.0}});
  std::vector<std::vector<double>> result;
  for (const auto& p : net.parameters()) result.push_back(p.parameter->grad.to_values());
  return result;
}

// Largest |a - b| over a tensor, relative to the largest |a| of that tensor.
double worst_relative(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    double scale = 1e-12, difference = 0;
    for (std::size_t i = 0; i < a[t].size(); ++i) {
      scale = std::max(scale, std::abs(a[t][i]));
      difference = std::max(difference, std::abs(a[t][i] - b[t][i]));
    }
    worst = std::max(worst, difference / scale);
  }
  return worst;
}

TEST(ConvolutionSharedScratch, CudaMatchesTheCpuAndStaysTheSameAfterALargerNetUsedTheScratch) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  const Shape small{2, 3, 32, 24}, large{2, 3, 64, 64};
  Net cpu(convolutions(), registry, {{"image", small}}, DType::f32, Device::cpu(), 5);
  cpu.input("image").copy_from(random_image(small, 1, Device::cpu()));
  Context cpu_ctx;
  const auto expected = gradients(cpu, cpu_ctx);
  // Products on TF32 or BF16 tensor cores round the operands (11 and 8
  // significant bits), through five layers whose ReLU gates the rounding
  // may flip: against the exact CPU, 5% of each tensor's largest gradient
  // for both (strict f32: 1e-4).
  for (auto [precision, tolerance] :
       {std::pair{Precision::f32, 1e-4}, std::pair{Precision::tf32, 5e-2}, std::pair{Precision::bf16, 5e-2}}) {
    Context ctx(Device::cuda(0));
    ctx.set_precision(precision);
    Net gpu(convolutions(), registry, {{"image", small}}, DType::f32, Device::cuda(0), 5);
    gpu.input("image").copy_from(random_image(small, 1, Device::cuda(0)));
    const auto first = gradients(gpu, ctx);
    Net larger(convolutions(), registry, {{"image", large}}, DType::f32, Device::cuda(0), 9);
    larger.input("image").copy_from(random_image(large, 2, Device::cuda(0)));
    gradients(larger, ctx);  // fills the shared buffers with its own data
    const auto again = gradients(gpu, ctx);
    const double against_cpu = worst_relative(expected, first), between_passes = worst_relative(first, again);
    std::printf("[ info ] %s: against the CPU %.3g, second pass against first %.3g\n", precision_name(precision),
                against_cpu, between_passes);
    EXPECT_LE(against_cpu, tolerance) << precision_name(precision);
    // The same work on the same data: only the order of atomic additions
    // (bias gradients) may differ.
    EXPECT_LE(between_passes, 1e-5) << precision_name(precision);
  }
}

}  // namespace
}  // namespace plexus::shared_scratch_test

namespace plexus::kept_source_test {
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
}  // namespace plexus::kept_source_test

// Concat and Split, the graph layers that join and slice channels, each
// section below in its own namespace.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

// Concat: forward by hand across a batch, gradient checks for every input
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity (also past one launch's
// parts and a grid's batch items), a gradient not wanted, shape errors.
namespace plexus {
namespace concat_test {
namespace {

const Registry registry = builtin_registry();

TEST(Concat, ForwardJoinsChannelsOfEachBatchItem) {
  auto layer = registry.create("Concat", "cat", {});
  Context ctx;
  // a: [N=2, C=1, 2], b: [2, 2, 2]; per batch item, a's channel comes first.
  Tensor a = Tensor::from_values({1, 2, /* item 1 */ 7, 8}, {2, 1, 2});
  Tensor b = Tensor::from_values({3, 4, 5, 6, /* item 1 */ 9, 10, 11, 12}, {2, 2, 2});
  ASSERT_EQ(layer->output_shapes({a.shape(), b.shape()}), (std::vector<Shape>{{2, 3, 2}}));
  Tensor y({2, 3, 2});
  layer->forward(ctx, {&a, &b}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST(Concat, BackwardSlicesTheOutputGradient) {
  auto layer = registry.create("Concat", "cat", {});
  Context ctx;
  Tensor a({2, 1, 1}), b({2, 2, 1}), y({2, 3, 1});
  Tensor dy = Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3, 1}), da({2, 1, 1}), db({2, 2, 1});
  layer->backward(ctx, {&a, &b}, {&y}, {&dy}, {&da, &db});
  EXPECT_EQ(da.to_values(), (std::vector<double>{1, 4}));
  EXPECT_EQ(db.to_values(), (std::vector<double>{2, 3, 5, 6}));
}

TEST(Concat, GradientsCpu) {
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Concat", {}, {{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 2, 4, 5}})));
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Concat", {}, {{3, 2}, {3, 5}})));
}

TEST(Concat, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "Concat", {}, {{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 2, 4, 5}}, Device::cuda())));
}

TEST(Concat, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Concat", {}, {{4, 8, 16, 16}, {4, 3, 16, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Concat", {}, {{3, 5, 7}, {3, 1, 7}, {3, 2, 7}}, f64)));
}

// The copies are exact, so CUDA must match the CPU exactly: with more parts
// than one launch copies (16), and more batch items than a grid's third
// dimension holds (65,535).
TEST(Concat, ParityCpuCudaManyPartsAndItems) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions exact;
  exact.tolerance = 0;
  std::vector<Shape> parts;
  for (std::int64_t k = 0; k < 18; ++k) parts.push_back({3, 1 + k % 3, 5});
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Concat", {}, parts, exact)));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Concat", {}, {{70000, 1, 1}, {70000, 2, 1}}, exact)));
}

// An input no loss depends on gets no gradient (null); the others are written.
TEST(Concat, BackwardWritesOnlyTheWantedInputGradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  auto layer = registry.create("Concat", "cat", {});
  Context ctx(Device::cuda());
  Tensor a({2, 1, 1}, DType::f32, Device::cuda()), b({2, 2, 1}, DType::f32, Device::cuda());
  Tensor c({2, 1, 1}, DType::f32, Device::cuda()), y({2, 4, 1}, DType::f32, Device::cuda());
  Tensor dy = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4, 1}, DType::f32, Device::cuda());
  Tensor db({2, 2, 1}, DType::f32, Device::cuda());
  layer->backward(ctx, {&a, &b, &c}, {&y}, {&dy}, {nullptr, &db, nullptr});
  EXPECT_EQ(db.to_values(), (std::vector<double>{2, 3, 6, 7}));
}

TEST(Concat, RejectsOtherDimensionsThatDiffer) {
  auto layer = registry.create("Concat", "cat", {});
  std::string height = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 5, 4, 8}}); });
  EXPECT_TRUE(testing::contains(height, "node 'cat' (Concat): input 1 is [2, 5, 4, 8] but input 0 is [2, 3, 8, 8]"))
      << height;
  std::string batch = testing::shape_error_of([&] {
    layer->output_shapes({{2, 3, 8, 8}, {2, 3, 8, 8}, {1, 3, 8, 8}});
  });
  EXPECT_TRUE(testing::contains(batch, "input 2 is [1, 3, 8, 8]")) << batch;
  std::string rank = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 3, 64}}); });
  EXPECT_TRUE(testing::contains(rank, "input 1 is [2, 3, 64]")) << rank;
}

TEST(Concat, RejectsOneInputAndVectors) {
  auto layer = registry.create("Concat", "cat", {});
  std::string one = testing::shape_error_of([&] { layer->output_shapes({{2, 3}}); });
  EXPECT_TRUE(testing::contains(one, "node 'cat' (Concat): takes 2 or more inputs, got 1")) << one;
  std::string vectors = testing::shape_error_of([&] { layer->output_shapes({{2}, {2}}); });
  EXPECT_TRUE(testing::contains(vectors, "input 0 is [2]; Concat needs [N, C, ...]")) << vectors;
}

}  // namespace
}  // namespace concat_test
}  // namespace plexus

// Split: forward by hand across a batch, gradient checks (CPU; CUDA in f64 on
// a GPU), CPU/CUDA parity (also past one launch's parts and a grid's batch
// items), shape and parameter errors, and a Net in which one slice reaches
// no loss.
namespace plexus {
namespace split_test {
namespace {

const Registry registry = builtin_registry();

TEST(Split, ForwardSlicesChannelsOfEachBatchItem) {
  auto layer = registry.create("Split", "split", {{"sizes", {1, 2}}});
  Context ctx;
  Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6, /* item 1 */ 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  ASSERT_EQ(layer->output_shapes({x.shape()}), (std::vector<Shape>{{2, 1, 2}, {2, 2, 2}}));
  Tensor first({2, 1, 2}), rest({2, 2, 2});
  layer->forward(ctx, {&x}, {&first, &rest});
  EXPECT_EQ(first.to_values(), (std::vector<double>{1, 2, 7, 8}));
  EXPECT_EQ(rest.to_values(), (std::vector<double>{3, 4, 5, 6, 9, 10, 11, 12}));
}

TEST(Split, BackwardJoinsTheSliceGradients) {
  auto layer = registry.create("Split", "split", {{"sizes", {2, 1}}});
  Context ctx;
  Tensor x({2, 3}), first({2, 2}), rest({2, 1});
  Tensor dfirst = Tensor::from_values({1, 2, 4, 5}, {2, 2}), drest = Tensor::from_values({3, 6}, {2, 1});
  Tensor dx({2, 3});
  layer->backward(ctx, {&x}, {&first, &rest}, {&dfirst, &drest}, {&dx});
  EXPECT_EQ(dx.to_values(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(Split, GradientsCpu) {
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Split", {{"sizes", {1, 3, 2}}}, {{2, 6, 3, 3}})));
  EXPECT_TRUE(
      testing::gradients_match(check_gradients(registry, "Split", {{"sizes", nlohmann::json::array({4})}}, {{3, 4}})));
}

TEST(Split, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "Split", {{"sizes", {1, 3, 2}}}, {{2, 6, 3, 3}}, Device::cuda())));
}

TEST(Split, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Split", {{"sizes", {5, 3}}}, {{4, 8, 16, 16}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Split", {{"sizes", {2, 2, 1}}}, {{3, 5, 7}}, f64)));
}

// The copies are exact, so CUDA must match the CPU exactly: with more parts
// than one launch copies (16), and more batch items than a grid's third
// dimension holds (65,535).
TEST(Split, ParityCpuCudaManyPartsAndItems) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions exact;
  exact.tolerance = 0;
  nlohmann::json sizes = nlohmann::json::array();
  std::int64_t channels = 0;
  for (std::int64_t k = 0; k < 18; ++k) {
    sizes.push_back(1 + k % 3);
    channels += 1 + k % 3;
  }
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Split", {{"sizes", sizes}}, {{3, channels, 5}}, exact)));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Split", {{"sizes", {2, 1}}}, {{70000, 3}}, exact)));
}

// Forward on CUDA writes every slice of every batch item (the outputs start as NaN).
TEST(Split, ForwardSlicesChannelsOfEachBatchItemCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  auto layer = registry.create("Split", "split", {{"sizes", {1, 2}}});
  Context ctx(Device::cuda());
  Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2}, DType::f32, Device::cuda());
  const double nan = std::nan("");
  Tensor first = Tensor::from_values(std::vector<double>(4, nan), {2, 1, 2}, DType::f32, Device::cuda());
  Tensor rest = Tensor::from_values(std::vector<double>(8, nan), {2, 2, 2}, DType::f32, Device::cuda());
  layer->forward(ctx, {&x}, {&first, &rest});
  EXPECT_EQ(first.to_values(), (std::vector<double>{1, 2, 7, 8}));
  EXPECT_EQ(rest.to_values(), (std::vector<double>{3, 4, 5, 6, 9, 10, 11, 12}));
}

TEST(Split, RejectsSizesThatDoNotSumToTheChannels) {
  auto layer = registry.create("Split", "heads", {{"sizes", {1, 2}}});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 4, 8, 8}}); });
  EXPECT_TRUE(testing::contains(
      message, "node 'heads' (Split): parameter 'sizes' [1, 2] sums to 3 but the input [2, 4, 8, 8] has 4 channels"))
      << message;
}

TEST(Split, RejectsBadShapes) {
  auto layer = registry.create("Split", "heads", {{"sizes", {1, 1}}});
  std::string two = testing::shape_error_of([&] { layer->output_shapes({{2, 2}, {2, 2}}); });
  EXPECT_TRUE(testing::contains(two, "node 'heads' (Split): takes 1 input, got 2")) << two;
  std::string vector = testing::shape_error_of([&] { layer->output_shapes({{2}}); });
  EXPECT_TRUE(testing::contains(vector, "input is [2]; Split needs [N, C, ...]")) << vector;
}

TEST(Split, RejectsBadSizes) {
  std::string zero = testing::config_error_of([] { registry.create("Split", "heads", {{"sizes", {2, 0}}}); });
  EXPECT_TRUE(testing::contains(zero, "node 'heads' (Split)")) << zero;
  EXPECT_TRUE(testing::contains(zero, "must hold channel counts >= 1, got [2, 0]")) << zero;
  std::string empty = testing::config_error_of([] {
    registry.create("Split", "heads", {{"sizes", nlohmann::json::array()}});
  });
  EXPECT_TRUE(testing::contains(empty, "must list at least one channel count")) << empty;
  std::string missing = testing::config_error_of([] { registry.create("Split", "heads", nlohmann::json::object()); });
  EXPECT_TRUE(testing::contains(missing, "sizes")) << missing;
}

TEST(Split, SpecMustNameOneOutputPerSize) {
  ModelSpec spec;
  spec.add_input("x").add_node({"heads", "Split", {"x"}, {"a"}, {{"sizes", {1, 2}}}});
  try {
    Net net(spec, registry, {{"x", {1, 3}}});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_TRUE(testing::contains(e.what(), "node 'heads' (Split) produces 2 output(s) but the spec names 1"))
        << e.what();
  }
}

// x -> identity (LeakyReLU with slope 1) -> h -> Split [1, 2] -> a, b; only b
// reaches the loss, so dL/dh is zero on channel 0 and dL/db on channels 1, 2.
// One batch item, so the loss is a scalar.
TEST(Split, UnusedSliceGetsZeroGradientInANet) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"identity", "LeakyReLU", {"x"}, {"h"}, {{"negative_slope", 1.0}}})
      .add_node({"heads", "Split", {"h"}, {"a", "b"}, {{"sizes", {1, 2}}}})
      .add_node({"fc", "FullyConnected", {"b"}, {"out"}, {{"out_features", 1}, {"bias", false}}});
  Net net(spec, registry, {{"x", {1, 3, 2}}}, DType::f64, Device::cpu(), 5);
  Context ctx;
  net.input("x").copy_from(Tensor::from_values({1, 2, 3, 4, 5, 6}, {1, 3, 2}, DType::f64));
  net.forward(ctx);
  EXPECT_EQ(net.blob("a").to_values(), (std::vector<double>{1, 2}));
  EXPECT_EQ(net.blob("b").to_values(), (std::vector<double>{3, 4, 5, 6}));
  net.zero_grad();
  net.backward(ctx, {{"out", 1.0}});
  std::vector<double> db = net.blob_grad("b").to_values();
  std::vector<double> dh = net.blob_grad("h").to_values();
  EXPECT_EQ(dh, (std::vector<double>{0, 0, db[0], db[1], db[2], db[3]}));
  for (double value : db) EXPECT_NE(value, 0.0);
}

}  // namespace
}  // namespace split_test
}  // namespace plexus

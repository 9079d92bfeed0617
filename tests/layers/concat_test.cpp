// Concat: forward by hand across a batch, gradient checks for every input
// (CPU; CUDA in f64 on a GPU), CPU/CUDA parity (also past one launch's
// parts and a grid's batch items), a gradient not wanted, shape errors.
#include <gtest/gtest.h>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
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
}  // namespace plexus

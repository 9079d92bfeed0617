// Add: forward by hand, gradient checks for every input (CPU; CUDA in f64 on
// a GPU), CPU/CUDA parity, shape errors, and a residual block in a Net.
#include <gtest/gtest.h>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

TEST(Add, ForwardSumsEveryInput) {
  auto layer = registry.create("Add", "add", {});
  Context ctx;
  Tensor a = Tensor::from_values({1.0, 2.0, -3.0}, {3});
  Tensor b = Tensor::from_values({10.0, 20.0, 30.0}, {3});
  Tensor c = Tensor::from_values({100.0, -200.0, 0.5}, {3});
  Tensor y({3});
  layer->forward(ctx, {&a, &b, &c}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{111.0, -178.0, 27.5}));
}

TEST(Add, GradientsCpu) {
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Add", {}, {{2, 3, 4, 5}, {2, 3, 4, 5}})));
  EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Add", {}, {{7}, {7}, {7}})));
}

TEST(Add, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::gradients_match(
      check_gradients(registry, "Add", {}, {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}, Device::cuda())));
}

TEST(Add, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Add", {}, {{4, 8, 16, 16}, {4, 8, 16, 16}})));
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Add", {}, {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Add", {}, {{2, 3, 9, 9}, {2, 3, 9, 9}}, f64)));
}

TEST(Add, RejectsShapesThatDiffer) {
  auto layer = registry.create("Add", "skip", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 4, 8, 8}}); });
  EXPECT_TRUE(testing::contains(message, "node 'skip' (Add): input 1 is [2, 4, 8, 8] but input 0 is [2, 3, 8, 8]"))
      << message;
}

TEST(Add, RejectsOneInput) {
  auto layer = registry.create("Add", "skip", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3}}); });
  EXPECT_TRUE(testing::contains(message, "node 'skip' (Add): takes 2 or more inputs, got 1")) << message;
}

// y = x + relu(x): dL/dx sums the skip path (1) and the branch ([x > 0]).
TEST(Add, ResidualBlockInANet) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"branch", "ReLU", {"x"}, {"r"}})
      .add_node({"skip", "Add", {"x", "r"}, {"y"}})
      .add_node({"double", "Add", {"y", "y"}, {"z"}})
      .add_node({"fc", "FullyConnected", {"z"}, {"out"}, {{"out_features", 1}, {"bias", false}}});
  Net net(spec, registry, {{"x", {1, 4}}}, DType::f64, Device::cpu(), 1);
  Context ctx;
  net.input("x").copy_from(Tensor::from_values({-1.0, 2.0, -3.0, 4.0}, {1, 4}, DType::f64));
  net.forward(ctx);
  EXPECT_EQ(net.blob("z").to_values(), (std::vector<double>{-2.0, 8.0, -6.0, 16.0}));
  net.zero_grad();
  net.backward(ctx, {{"out", 1.0}});
  // dL/dz = w (the weights); dL/dy = 2w; dL/dr = 2w; the branch passes it where r > 0.
  std::vector<double> w = net.blob_grad("z").to_values();
  std::vector<double> dr = net.blob_grad("r").to_values();
  for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(dr[k], 2 * w[k]) << k;
}

}  // namespace
}  // namespace plexus

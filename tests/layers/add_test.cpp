// Add: forward by hand, gradient checks for every input (CPU; CUDA in f64 on
// a GPU), CPU/CUDA parity, shape errors, and a residual block in a Net; the
// same for inputs that broadcast (sizes 1 repeated), with the fused
// activation and a Net that fuses it.
#include <gtest/gtest.h>

#include <cmath>

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

// ---- Broadcasting ----

// The patterns attention and gating use, on [N, C, H, W]: channel ([N, C,
// 1, 1]), spatial ([N, 1, H, W]), per-channel over the batch ([1, C, 1,
// 1]), either input broadcast, both at once, a lone size 1 inside, and three
// inputs.
std::vector<std::vector<Shape>> broadcast_patterns() {
  return {{{2, 3, 4, 5}, {2, 3, 1, 1}},
          {{2, 3, 4, 5}, {2, 1, 4, 5}},
          {{1, 3, 1, 1}, {2, 3, 4, 5}},
          {{2, 1, 4, 5}, {1, 3, 1, 1}},
          {{2, 3, 4, 5}, {2, 3, 1, 5}},
          {{3, 1}, {1, 4}},
          {{2, 3, 4, 5}, {1, 3, 1, 1}, {2, 1, 4, 5}}};
}

// y[i, j] = a[i, 0] + b[0, j]: each input repeated along the dimension it has 1 in.
TEST(Add, BroadcastForwardByHand) {
  auto layer = registry.create("Add", "add", {});
  EXPECT_EQ(layer->output_shapes({{2, 1}, {1, 3}}), (std::vector<Shape>{{2, 3}}));
  Context ctx;
  Tensor a = Tensor::from_values({1.0, 2.0}, {2, 1});
  Tensor b = Tensor::from_values({10.0, 20.0, 30.0}, {1, 3});
  Tensor y({2, 3});
  layer->forward(ctx, {&a, &b}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{11.0, 21.0, 31.0, 12.0, 22.0, 32.0}));
  // A third input of the output's shape after two that broadcast.
  Tensor c = Tensor::from_values({100.0, 200.0, 300.0, 400.0, 500.0, 600.0}, {2, 3});
  layer->forward(ctx, {&a, &b, &c}, {&y});
  EXPECT_EQ(y.to_values(), (std::vector<double>{111.0, 221.0, 331.0, 412.0, 522.0, 632.0}));
}

// dL/dx of a broadcast input is dL/dy summed over the dimensions it has 1 in.
TEST(Add, BroadcastBackwardByHand) {
  auto layer = registry.create("Add", "add", {});
  Context ctx;
  Tensor x = Tensor::from_values(std::vector<double>(12, 0.0), {1, 2, 2, 3}, DType::f64);
  Tensor gate = Tensor::from_values({0.0, 0.0}, {1, 2, 1, 1}, DType::f64);
  Tensor row = Tensor::from_values({0.0, 0.0, 0.0}, {1, 1, 1, 3}, DType::f64);
  Tensor y({1, 2, 2, 3}, DType::f64);
  Tensor dy = Tensor::from_values({1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}, {1, 2, 2, 3}, DType::f64);
  Tensor dx({1, 2, 2, 3}, DType::f64), dgate({1, 2, 1, 1}, DType::f64), drow({1, 1, 1, 3}, DType::f64);
  layer->forward(ctx, {&x, &gate, &row}, {&y});
  layer->backward(ctx, {&x, &gate, &row}, {&y}, {&dy}, {&dx, &dgate, &drow});
  EXPECT_EQ(dx.to_values(), dy.to_values());
  EXPECT_EQ(dgate.to_values(), (std::vector<double>{21.0, 210.0}));      // 1+..+6, 10+..+60
  EXPECT_EQ(drow.to_values(), (std::vector<double>{55.0, 77.0, 99.0}));  // 1+4+10+40, 2+5+20+50, 3+6+30+60
}

// An empty output: nothing to write, and a broadcast input's gradient is an empty sum, 0.
TEST(Add, BroadcastToAnEmptyOutput) {
  auto layer = registry.create("Add", "add", {});
  EXPECT_EQ(layer->output_shapes({{2, 0}, {2, 1}}), (std::vector<Shape>{{2, 0}}));
  Context ctx;
  Tensor a({2, 0}), b = Tensor::from_values({1.0, 2.0}, {2, 1}), y({2, 0}), dy({2, 0}), da({2, 0});
  Tensor db = Tensor::from_values({7.0, 7.0}, {2, 1});
  layer->forward(ctx, {&a, &b}, {&y});
  layer->backward(ctx, {&a, &b}, {&y}, {&dy}, {&da, &db});
  EXPECT_EQ(db.to_values(), (std::vector<double>{0.0, 0.0}));
}

// relu(a + b) as it writes y, when the Net fuses the ReLU after the sum.
TEST(Add, BroadcastAppliesTheFusedActivation) {
  auto layer = registry.create("Add", "add", {});
  Context ctx;
  Tensor a = Tensor::from_values({1.0, -2.0, 3.0, -4.0}, {1, 1, 2, 2});
  Tensor b = Tensor::from_values({-2.0}, {1, 1, 1, 1});
  Tensor y({1, 1, 2, 2});
  ForwardOptions options;
  options.output_activation = {true, 0.25};
  layer->forward(ctx, {&a, &b}, {&y}, options);
  EXPECT_EQ(y.to_values(), (std::vector<double>{-0.25, -1.0, 1.0, -1.5}));
}

TEST(Add, BroadcastGradientsCpu) {
  for (const auto& shapes : broadcast_patterns())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Add", {}, shapes))) << shape_str(shapes[1]);
}

TEST(Add, BroadcastGradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const auto& shapes : broadcast_patterns())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "Add", {}, shapes, Device::cuda())))
        << shape_str(shapes[1]);
}

// Large enough that the CUDA sums take both layouts: a block per element of
// the gradient (summed over H*W) and a thread per element (summed over C).
TEST(Add, BroadcastParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const std::vector<std::vector<Shape>> shapes{{{4, 16, 16, 16}, {4, 16, 1, 1}},
                                               {{4, 16, 16, 16}, {4, 1, 16, 16}},
                                               {{1, 16, 1, 1}, {4, 16, 16, 16}},
                                               {{4, 16, 16, 16}, {1, 16, 1, 1}, {4, 1, 16, 16}}};
  for (const auto& inputs : shapes) {
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Add", {}, inputs))) << shape_str(inputs[1]);
    ParityOptions f64;
    f64.dtype = DType::f64;
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "Add", {}, inputs, f64))) << shape_str(inputs[1]);
  }
}

TEST(Add, RejectsShapesThatDoNotBroadcast) {
  auto layer = registry.create("Add", "skip", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {2, 3, 4, 8}}); });
  EXPECT_TRUE(testing::contains(message, "node 'skip' (Add): input 1 is [2, 3, 4, 8] but input 0 is [2, 3, 8, 8]"))
      << message;
  EXPECT_TRUE(testing::contains(message, "each size the output's or 1")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 3, 8, 8}, {3, 1, 1}}); });  // another rank
  EXPECT_TRUE(testing::contains(message, "input 1 is [3, 1, 1] but input 0 is [2, 3, 8, 8]")) << message;
  // The output's 3 comes from input 1, which input 2's 5 conflicts with.
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 1, 4}, {2, 3, 1}, {2, 5, 4}}); });
  EXPECT_TRUE(testing::contains(message, "input 2 is [2, 5, 4] but input 1 is [2, 3, 1]")) << message;
  message = testing::shape_error_of([&] {
    layer->output_shapes({{1, 1, 1, 1, 1, 1, 1, 1, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1}});
  });
  EXPECT_TRUE(testing::contains(message, "at most 8 dimensions")) << message;
}

// A channel gate [N, C, 1, 1] added to a convolution's output, then a ReLU
// the Add applies as it writes (fused) or not: the same values and
// gradients, bit for bit; the gate's gradient is the sum over H and W of
// the sum's.
TEST(Add, BroadcastInANetFusedOrNot) {
  ModelSpec spec;
  spec.add_input("x")
      .add_input("gate")
      .add_input("target")
      .add_node({"conv", "Conv2d", {"x"}, {"c"}, {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}}})
      .add_node({"gate_act", "Tanh", {"gate"}, {"g"}})
      .add_node({"gated", "Add", {"c", "g"}, {"s"}})
      .add_node({"act", "ReLU", {"s"}, {"r"}})
      .add_node({"loss", "MSELoss", {"r", "target"}, {"out"}});
  const std::map<std::string, Shape> shapes{{"x", {2, 2, 4, 4}}, {"gate", {2, 3, 1, 1}}, {"target", {2, 3, 4, 4}}};
  std::map<bool, std::map<std::string, std::vector<double>>> results;
  for (bool fused : {false, true}) {
    Net net(spec, registry, shapes, DType::f64, Device::cpu(), 5);
    net.set_activation_fusion(fused);
    EXPECT_EQ(net.fused_activation_count(), fused ? 1u : 0u);
    Context ctx;
    std::vector<double> x(64);
    for (int k = 0; k < 64; ++k) x[k] = std::sin(0.7 * k);
    net.input("x").copy_from(Tensor::from_values(x, {2, 2, 4, 4}, DType::f64));
    net.input("target").copy_from(Tensor::from_values(std::vector<double>(96, 0.25), {2, 3, 4, 4}, DType::f64));
    net.input("gate").copy_from(Tensor::from_values({-1.0, 0.5, 2.0, -0.25, 1.0, -3.0}, {2, 3, 1, 1}, DType::f64));
    net.forward(ctx);
    net.zero_grad();
    net.backward(ctx, {{"out", 1.0}});
    std::vector<double> ds = net.blob_grad("s").to_values(), dg = net.blob_grad("g").to_values();
    for (int k = 0; k < 6; ++k) {
      double sum = 0;
      for (int p = 0; p < 16; ++p) sum += ds[k * 16 + p];
      EXPECT_DOUBLE_EQ(dg[k], sum) << k;
    }
    results[fused] = {{"out", {net.scalar("out")}},
                      {"ds", ds},
                      {"dg", dg},
                      {"dgate", net.blob_grad("gate").to_values()},
                      {"dx", net.blob_grad("x").to_values()}};
  }
  EXPECT_EQ(results[true], results[false]);
}

}  // namespace
}  // namespace plexus

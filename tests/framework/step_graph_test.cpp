// StepGraph: a training step recorded into a CUDA graph and replayed gives
// the parameters an eager step gives from the same state; replays draw new
// noise after each reseed (the seed lives in device memory); layers that do
// not declare themselves capturable are named; on the CPU the step just runs.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/test_layers.h"
#include "plexus/builtin_layers.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"
#include "plexus/step_graph.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

ModelSpec bls2017() { return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bls2017.json"); }

// Deterministic batches in [0, 1], different per step.
Tensor batch(const Shape& shape, int step, DType dtype) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 + 0.5 * std::sin(0.013 * i + 0.7 * step);
  return Tensor::from_values(values, shape, dtype);
}

TEST(StepGraph, RunsTheStepEveryTimeOnTheCpu) {
  Context ctx;
  StepGraph graph(true);
  int calls = 0;
  for (int i = 0; i < 3; ++i) graph.run(ctx, 0, [&] { ++calls; });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(graph.recordings(), 0);
  EXPECT_FALSE(graph.replayed_last());
}

TEST(StepGraph, NetNamesTheFirstLayerThatIsNotCapturable) {
  Registry registry = builtin_registry();
  Net autoencoder(bls2017(), registry, {{"image", {1, 3, 16, 16}}});
  std::string culprit = "unchanged";
  EXPECT_TRUE(autoencoder.cuda_graph_capturable(&culprit)) << culprit;

  Registry with_test_layers = test::test_registry();
  ModelSpec spec = ModelSpec::from_text(R"({"inputs": ["x"], "nodes": [
      {"name": "first", "type": "ReLU", "inputs": ["x"], "outputs": ["h"]},
      {"name": "scale", "type": "TestScale", "inputs": ["h"], "outputs": ["y"]}]})");
  Net net(spec, with_test_layers, {{"x", {2}}});
  EXPECT_FALSE(net.cuda_graph_capturable(&culprit));
  EXPECT_EQ(culprit, "node 'scale' (TestScale)");
}

TEST(StepGraph, LayoutVersionChangesWhenBlobsAreReallocated) {
  Registry registry = builtin_registry();
  Net net(bls2017(), registry, {{"image", {1, 3, 16, 16}}});
  const std::uint64_t first = net.layout_version();
  net.reshape({{"image", {1, 3, 32, 32}}});
  EXPECT_NE(net.layout_version(), first);
}

// Step k: batch k, noise seed 1000 + k, forward, backward, Adam.
void train(Net& net, Adam& adam, Context& ctx, StepGraph& graph, int steps, const Shape& shape) {
  const auto parameters = net.parameters();
  const double weight = 0.01 * 255 * 255;
  for (int step = 0; step < steps; ++step) {
    net.input("image").copy_from(batch(shape, step, net.dtype()));
    ctx.reseed(1000 + step);
    adam.begin_step(ctx, parameters);
    graph.run(ctx, net.layout_version(), [&] {
      net.zero_grad();
      net.forward(ctx);
      net.backward(ctx, {{"mse", weight}, {"bpp", 1.0}});
      adam.apply(ctx, parameters);
    });
  }
  ctx.synchronize();
}

// bls2017 trained 4 steps eagerly and through a graph (step 1 eager warm-up,
// step 2 recorded, steps 3 and 4 replayed) from the same initial state.
// Equal up to the order of floating-point atomics, which reorders even
// between two eager runs (convolution bias and entropy-model gradients):
// bounded in f64 by 1e-12 relative, in f32 by 1e-6 absolute (1% of one
// Adam step of lr 1e-4).
TEST(StepGraph, CudaReplayedTrainingStepsEqualEagerOnes) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Registry registry = builtin_registry();
  const Shape shape{2, 3, 32, 32};
  for (DType dtype : {DType::f64, DType::f32}) {
    Net eager(bls2017(), registry, {{"image", shape}}, dtype, Device::cuda(), 5);
    Net replayed(bls2017(), registry, {{"image", shape}}, dtype, Device::cuda(), 5);
    Context eager_ctx(Device::cuda()), replay_ctx(Device::cuda());
    Adam eager_adam(1e-4), replay_adam(1e-4);
    StepGraph off(false), on(true);
    train(eager, eager_adam, eager_ctx, off, 4, shape);
    train(replayed, replay_adam, replay_ctx, on, 4, shape);
    EXPECT_EQ(on.recordings(), 1);
    EXPECT_TRUE(on.replayed_last());
    auto a = eager.parameters(), b = replayed.parameters();
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    std::size_t identical = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      std::vector<double> x = a[k].parameter->value.to_values(), y = b[k].parameter->value.to_values();
      bool same = x == y;
      identical += same;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double difference = std::abs(x[i] - y[i]);
        worst = std::max(worst, dtype == DType::f64 ? difference / std::max(1.0, std::abs(x[i])) : difference);
      }
    }
    std::printf("[ info ] %s: %zu of %zu parameters bit-identical, largest difference %.3g\n", dtype_name(dtype),
                identical, a.size(), worst);
    EXPECT_LE(worst, dtype == DType::f64 ? 1e-12 : 1e-6) << dtype_name(dtype);
    EXPECT_EQ(eager_adam.steps_taken(), replay_adam.steps_taken());
  }
}

// Two nets on one context share the convolutions' scratch buffers
// (Context::shared_state). A larger net stepping between the replays of a
// smaller one's graph grows that scratch, replacing memory the graph
// recorded: the graph is recorded again, and the smaller net trains what it
// trains alone (same tolerance as above).
TEST(StepGraph, CudaGraphIsRecordedAgainWhenAnotherNetOutgrewTheSharedScratch) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Registry registry = builtin_registry();
  const Shape small{2, 3, 32, 32}, large{2, 3, 64, 64};
  Net alone(bls2017(), registry, {{"image", small}}, DType::f32, Device::cuda(), 5);
  Net replayed(bls2017(), registry, {{"image", small}}, DType::f32, Device::cuda(), 5);
  Net other(bls2017(), registry, {{"image", large}}, DType::f32, Device::cuda(), 6);
  Context alone_ctx(Device::cuda()), ctx(Device::cuda());
  for (Context* c : {&alone_ctx, &ctx}) c->set_precision(Precision::bf16);  // the tensor-core engine's scratch
  Adam alone_adam(1e-4), replay_adam(1e-4), other_adam(1e-4);
  StepGraph off(false), on(true), other_off(false);
  train(alone, alone_adam, alone_ctx, off, 3, small);
  train(replayed, replay_adam, ctx, on, 3, small);  // warm-up, recording, replay
  EXPECT_EQ(on.recordings(), 1);
  const std::uint64_t generation = ctx.memory_generation();
  train(other, other_adam, ctx, other_off, 1, large);
  EXPECT_GT(ctx.memory_generation(), generation) << "the larger net did not grow the shared scratch";
  train(alone, alone_adam, alone_ctx, off, 3, small);
  train(replayed, replay_adam, ctx, on, 3, small);  // warm-up again, recording, replay
  EXPECT_EQ(on.recordings(), 2);
  auto a = alone.parameters(), b = replayed.parameters();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    std::vector<double> x = a[k].parameter->value.to_values(), y = b[k].parameter->value.to_values();
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  }
  std::printf("[ info ] largest difference from the net trained alone: %.3g\n", worst);
  EXPECT_LE(worst, 1e-6);
}

// A net that only adds noise: the replayed graph's output after reseed(s)
// is the eager output after reseed(s), and differs between seeds.
TEST(StepGraph, CudaReplaysDrawTheNoiseOfTheCurrentSeed) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Registry registry = builtin_registry();
  ModelSpec spec = ModelSpec::from_text(R"({"inputs": ["x"], "nodes": [
      {"name": "noise", "type": "UniformNoise", "inputs": ["x"], "outputs": ["y"]}]})");
  Net net(spec, registry, {{"x", {4096}}}, DType::f32, Device::cuda());
  Context ctx(Device::cuda());
  auto forward_at = [&](StepGraph& graph, std::uint64_t seed) {
    ctx.reseed(seed);
    graph.run(ctx, net.layout_version(), [&] { net.forward(ctx); });
    return net.blob("y").to_values();
  };
  StepGraph off(false), on(true);
  std::vector<std::vector<double>> eager, replayed;
  for (std::uint64_t seed : {1, 2, 3, 4}) eager.push_back(forward_at(off, seed));
  for (std::uint64_t seed : {1, 2, 3, 4}) replayed.push_back(forward_at(on, seed));
  EXPECT_EQ(on.recordings(), 1);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(replayed[k], eager[k]) << "seed " << k + 1;
  EXPECT_NE(replayed[2], replayed[3]);
  for (double v : replayed[3]) ASSERT_TRUE(v > -0.5 && v <= 0.5) << v;
}

}  // namespace
}  // namespace plexus

// Lanes (framework/src/net_lanes.h): on CUDA a training net runs the paths
// of its graph that do not depend on each other on streams of their own.
// The plan is checked on the bundled models (CPU: it does not depend on the
// device); on a GPU, nets with lanes must compute what the same nets on one
// stream compute, eagerly and replayed from a CUDA graph, and the gradient
// buckets of data-parallel training must reduce complete gradients although
// the nodes that finish a bucket ran on several lanes. The CUDA tests skip
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "error_of.h"
#include "plexus/builtin_layers.h"
#include "plexus/distributed/communicator.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/net.h"
#include "plexus/registry.h"
#include "plexus/step_graph.h"
#include "plexus/tensor_ops.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

ModelSpec bundled(const std::string& name) {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/" + name + ".json");
}

const Shape kSmallImage = {1, 3, 64, 64};

TEST(NetLanes, AHyperpriorRunsItsHyperPathsBesideItsSynthesisTransform) {
  const Registry registry = builtin_registry();
  Net net(bundled("bmshj2018-hyperprior"), registry, {{"image", kSmallImage}});
  net.set_max_lanes(4);
  EXPECT_EQ(net.lane_count(), 4);
  // Each transform is one chain on one lane.
  for (const char* node : {"g_a0_gdn", "g_a1", "g_a3", "h_a_abs", "h_a2", "hyper_quantizer"})
    EXPECT_EQ(net.lane_of(node), net.lane_of("g_a0")) << node;
  for (const char* node : {"g_s0_igdn", "g_s2", "g_s3", "distortion"})
    EXPECT_EQ(net.lane_of(node), net.lane_of("g_s0")) << node;
  for (const char* node : {"h_s0_relu", "h_s2_relu"}) EXPECT_EQ(net.lane_of(node), net.lane_of("h_s0")) << node;
  // The synthesis transform beside both hyper transforms, and the
  // hyper-synthesis beside the hyper-analysis's entropy model.
  EXPECT_NE(net.lane_of("g_s0"), net.lane_of("h_a0"));
  EXPECT_NE(net.lane_of("g_s0"), net.lane_of("h_s0"));
  EXPECT_NE(net.lane_of("h_s0"), net.lane_of("hyper_entropy_model"));
  // The hyper paths' streams take the next free slots; the synthesis
  // transform's waits for them.
  EXPECT_FALSE(net.lane_is_urgent(net.lane_of("g_s0")));
  for (const char* node : {"h_a0", "h_s0", "gaussian_conditional"})
    EXPECT_TRUE(net.lane_is_urgent(net.lane_of(node))) << node;

  net.set_max_lanes(2);
  EXPECT_EQ(net.lane_count(), 2);
  net.set_max_lanes(1);
  EXPECT_EQ(net.lane_count(), 1);
  for (const std::string& node : net.execution_order()) EXPECT_EQ(net.lane_of(node), 0) << node;
}

TEST(NetLanes, AFactorizedPriorRunsItsEntropyModelBesideItsSynthesisTransform) {
  const Registry registry = builtin_registry();
  Net net(bundled("bls2017"), registry, {{"image", kSmallImage}});
  net.set_max_lanes(4);
  EXPECT_EQ(net.lane_count(), 2);
  for (const char* node : {"g_a2", "quantizer", "entropy_model", "rate"}) EXPECT_EQ(net.lane_of(node), 0) << node;
  for (const char* node : {"g_s0", "g_s1_igdn", "g_s2", "distortion"}) EXPECT_EQ(net.lane_of(node), 1) << node;
  EXPECT_TRUE(net.lane_is_urgent(0));
  EXPECT_FALSE(net.lane_is_urgent(1));
}

TEST(NetLanes, AChainOfLayersRunsOnOneLane) {
  const Registry registry = builtin_registry();
  const ModelSpec chain = ModelSpec::from_text(R"({"name": "chain", "inputs": ["x"], "nodes": [
      {"name": "c0", "type": "Conv2d", "inputs": ["x"], "outputs": ["a"],
       "params": {"out_channels": 8, "kernel": 3, "padding": 1}},
      {"name": "r0", "type": "ReLU", "inputs": ["a"], "outputs": ["b"]},
      {"name": "c1", "type": "Conv2d", "inputs": ["b"], "outputs": ["c"],
       "params": {"out_channels": 3, "kernel": 3, "padding": 1}},
      {"name": "loss", "type": "MSELoss", "inputs": ["c", "x"], "outputs": ["mse"]}]})");
  Net net(chain, registry, {{"x", {1, 3, 8, 8}}});
  net.set_max_lanes(4);
  EXPECT_EQ(net.lane_count(), 1);
}

TEST(NetLanes, RefusesFewerThanOneLaneAndUnknownNodes) {
  const Registry registry = builtin_registry();
  Net net(bundled("bls2017"), registry, {{"image", kSmallImage}});
  EXPECT_NE(test::error_of<ConfigError>([&] { net.set_max_lanes(0); }).find("at least 1 lane, not 0"), std::string::npos);
  EXPECT_NE(test::error_of<ConfigError>([&] { net.lane_of("g_x9"); }).find("no node named 'g_x9'"), std::string::npos);
}

const Shape kImage = {4, 3, 128, 128};

void fill_image(Net& net) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(kImage)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 + 0.45 * std::sin(0.013 * i + 0.3 * (i % 7));
  net.input("image").copy_from(Tensor::from_values(values, kImage, DType::f32));
}

// The caller reseeds ctx first: a reseed inside a recorded step would be
// recorded with it.
void step(Context& ctx, Net& net) {
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"mse", 0.01 * 255 * 255}, {"bpp", 1.0}});
}

struct Values {
  std::map<std::string, std::vector<double>> blobs, blob_grads, parameter_grads;
};

Values values_of(Context& ctx, Net& net) {
  ctx.synchronize();
  Values values;
  for (const auto& node : net.spec().nodes)
    for (const auto& blob : node.outputs) {
      values.blobs[blob] = net.blob(blob).to_values();
      values.blob_grads[blob] = net.blob_grad(blob).to_values();
    }
  for (const NamedParameter& named : net.parameters()) values.parameter_grads[named.name] = named.parameter->grad.to_values();
  return values;
}

// Within `tolerance` of the largest magnitude of each expected tensor (0:
// bit for bit), and not all zeros.
void expect_same(const std::map<std::string, std::vector<double>>& actual,
                 const std::map<std::string, std::vector<double>>& expected, double tolerance, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest_overall = 0;
  for (const auto& [name, want] : expected) {
    const std::vector<double>& got = actual.at(name);
    ASSERT_EQ(got.size(), want.size()) << what << " " << name;
    double scale = 0;
    for (double value : want) scale = std::max(scale, std::abs(value));
    largest_overall = std::max(largest_overall, scale);
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (tolerance == 0) ASSERT_EQ(got[i], want[i]) << what << " " << name << ", element " << i;
      else ASSERT_NEAR(got[i], want[i], tolerance * scale) << what << " " << name << ", element " << i;
    }
  }
  EXPECT_GT(largest_overall, 0.0) << what << ": all zeros, the test compares nothing";
}

// Forward values bit for bit, except the scalar losses; gradients to the
// rounding of the atomic sums some layers use (bias, entropy model).
void expect_same(const Values& lanes, const Values& one_stream) {
  std::map<std::string, std::vector<double>> maps, scalars, maps_expected, scalars_expected;
  for (const auto& [name, values] : one_stream.blobs) (values.size() == 1 ? scalars_expected : maps_expected)[name] = values;
  for (const auto& [name, values] : lanes.blobs) (values.size() == 1 ? scalars : maps)[name] = values;
  expect_same(maps, maps_expected, 0, "blob");
  expect_same(scalars, scalars_expected, 1e-6, "loss");
  expect_same(lanes.blob_grads, one_stream.blob_grads, 1e-5, "blob gradient");
  expect_same(lanes.parameter_grads, one_stream.parameter_grads, 1e-5, "parameter gradient");
}

// f32 runs the convolutions through im2col and cuBLAS (each lane has its
// own handle and workspace); bf16 through the tensor-core engine, whose
// shared scratch each lane has its own of, and bf16 activation storage.
TEST(NetLanes, ComputeWhatOneStreamComputesEagerlyAndInACudaGraphCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  for (const char* model : {"bmshj2018-hyperprior", "mbt2018-mean"})
    for (Precision precision : {Precision::bf16, Precision::f32}) {
      SCOPED_TRACE(std::string(model) + ", " + precision_name(precision));
      Context ctx(Device::cuda());
      ctx.set_precision(precision);
      const DType storage = activation_storage_for(precision, Device::cuda());
      Net one_stream(bundled(model), registry, {{"image", kImage}}, DType::f32, Device::cuda(), 5);
      Net lanes(bundled(model), registry, {{"image", kImage}}, DType::f32, Device::cuda(), 5);
      one_stream.set_max_lanes(1);
      lanes.set_max_lanes(4);
      ASSERT_GE(lanes.lane_count(), 3);
      one_stream.set_activation_storage(storage);
      lanes.set_activation_storage(storage);
      fill_image(one_stream);
      fill_image(lanes);
      StepGraph graph(true);
      for (std::uint64_t seed : {11u, 12u, 13u}) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        ctx.reseed(seed);
        step(ctx, one_stream);
        const Values expected = values_of(ctx, one_stream);
        // The first run is eager, the second records and launches the graph, the third replays it.
        ctx.reseed(seed);
        graph.run(ctx, lanes.layout_version(), [&] { step(ctx, lanes); });
        expect_same(values_of(ctx, lanes), expected);
      }
      EXPECT_EQ(graph.recordings(), 1);
      EXPECT_TRUE(graph.replayed_last());
    }
}

// One rank: its all-reduce (the mean of one buffer: the buffer) copies the
// buffer on the context's stream, where a real all-reduce starts reading it.
class SnapshotCommunicator : public distributed::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string kind() const override { return "snapshot"; }
  void all_reduce(Context& ctx, Tensor& buffer, distributed::Reduction) override {
    snapshots.emplace_back(buffer.shape(), buffer.dtype(), buffer.device());
    copy_elements(ctx, snapshots.back(), 0, buffer, 0, buffer.numel());
  }
  void broadcast(Context&, Tensor&, int) override {}
  void join(Context&) override {}
  void synchronize() override {}
  void barrier() override {}
  void mark_step(Context&) override {}
  std::vector<Tensor> snapshots;
};

// Small buckets, so that most are reduced during backward, some finished
// by nodes of the synthesis transform's lane and some by the hyper paths':
// what each all-reduce reads must be the final gradients.
TEST(NetLanes, GradientBucketsReduceCompleteGradientsFromEveryLaneCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  Context ctx(Device::cuda());
  ctx.set_precision(Precision::bf16);
  Net net(bundled("bmshj2018-hyperprior"), registry, {{"image", kImage}}, DType::f32, Device::cuda(), 5);
  net.set_max_lanes(4);
  net.set_activation_storage(DType::bf16);
  fill_image(net);
  SnapshotCommunicator communicator;
  distributed::GradientBuckets buckets(net, communicator, std::size_t{1} << 20);
  ASSERT_GE(buckets.buckets().size(), 4u);
  ctx.reseed(3);
  step(ctx, net);
  buckets.finish(ctx);
  ctx.synchronize();
  EXPECT_GE(buckets.last_pass_issued_during_backward(), 3);
  ASSERT_EQ(communicator.snapshots.size(), buckets.buckets().size());
  // Buckets are reduced in order (GradientBuckets), so snapshot k is bucket k.
  for (std::size_t b = 0; b < buckets.buckets().size(); ++b) {
    const std::vector<double> reduced = communicator.snapshots[b].to_values();
    std::size_t offset = 0;
    for (const NamedParameter& named : buckets.buckets()[b].parameters) {
      const std::vector<double> final_grad = named.parameter->grad.to_values();
      ASSERT_LE(offset + final_grad.size(), reduced.size());
      for (std::size_t i = 0; i < final_grad.size(); ++i)
        ASSERT_EQ(reduced[offset + i], final_grad[i]) << "bucket " << b << ", " << named.name << ", element " << i;
      offset += final_grad.size();
    }
    EXPECT_EQ(offset, reduced.size());
  }
}

}  // namespace
}  // namespace plexus

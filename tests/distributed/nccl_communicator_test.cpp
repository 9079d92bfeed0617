// The NCCL communicator on one GPU (world size 1): the collectives, the
// data-parallel step through NCCL against the plain step, and a missing rank
// that must end in an error within the timeout, not a hang. Skipped (with
// the reason) without a GPU or without NCCL in the build.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "data/data_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/nccl_communicator.h"
#include "plexus/distributed/replicas.h"
#include "plexus/grad_clip.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/step_graph.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::distributed {
namespace {

using testing::ScratchFolder;

// Why these tests cannot run here, or "" when they can.
std::string skip_reason() {
  if (!cuda_available()) return testing::kNoGpuReason;
  if (!built_with_nccl()) return "this build has no NCCL (see cmake/PlexusNccl.cmake)";
  return "";
}

const Registry registry = builtin_registry();
constexpr int kBatch = 4, kPatch = 32;

NcclSetup world_of_one(const ScratchFolder& folder, double timeout = 60) {
  NcclSetup setup;
  setup.rendezvous_file = folder / "rendezvous";
  setup.timeout_seconds = timeout;
  return setup;
}

ModelSpec conv_spec() {
  ModelSpec spec;
  spec.name = "tiny_conv";
  spec.add_input("image")
      .add_node(
          {"encode", "Conv2d", {"image"}, {"y"}, {{"out_channels", 8}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"relu", "ReLU", {"y"}, {"a"}, {}})
      .add_node({"decode",
                 "ConvTranspose2d",
                 {"a"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"mse", "MSELoss", {"x_hat", "image"}, {"loss"}, {}});
  return spec;
}

std::vector<double> batch_values(int step) {
  std::mt19937_64 rng(900 + step);
  std::uniform_real_distribution<double> dist(0, 1);
  std::vector<double> values(static_cast<std::size_t>(kBatch) * 3 * kPatch * kPatch);
  for (auto& v : values) v = dist(rng);
  return values;
}

// k steps of Adam with clipping on cuda:0; through `communicator` when given;
// with `cuda_graph`, each step recorded into a StepGraph (the bucket
// all-reduces with it) and replayed, paced by Communicator::mark_step.
std::map<std::string, std::vector<double>> train(int steps, Communicator* communicator, std::size_t bucket_bytes,
                                                 bool cuda_graph = false) {
  Net net(conv_spec(), registry, {{"image", {kBatch, 3, kPatch, kPatch}}}, DType::f32, Device::cuda(0), 5);
  Context ctx(Device::cuda(0), 5);
  Adam adam(0.01);
  GradientClipper clipper(0.05);
  const auto parameters = net.trainable_parameters();
  std::unique_ptr<GradientBuckets> buckets;
  if (communicator) {
    broadcast_parameters(ctx, *communicator, net.parameters());
    buckets = std::make_unique<GradientBuckets>(net, *communicator, bucket_bytes);
    EXPECT_GT(buckets->buckets().size(), bucket_bytes < 4096 ? 1u : 0u);
  }
  StepGraph graph(cuda_graph);
  for (int step = 0; step < steps; ++step) {
    if (communicator && !cuda_graph) communicator->synchronize();
    net.input("image").copy_from(Tensor::from_values(batch_values(step), {kBatch, 3, kPatch, kPatch}));
    adam.begin_step(ctx, parameters);
    graph.run(ctx, net.layout_version(), [&] {
      net.zero_grad();
      net.forward(ctx);
      net.backward(ctx, {{"loss", 1.0}});
      if (buckets) buckets->finish(ctx);
      clipper.clip(ctx, parameters);
      adam.apply(ctx, parameters);
    });
    if (communicator && cuda_graph) communicator->mark_step(ctx);
  }
  EXPECT_EQ(graph.recordings(), cuda_graph && steps > 1 ? 1 : 0);
  if (communicator) check_replicas_agree(ctx, *communicator, net.parameters(), steps);
  ctx.synchronize();
  std::map<std::string, std::vector<double>> values;
  for (const auto& p : parameters) values[p.name] = p.parameter->value.to_values();
  return values;
}

// Every parameter of `got` within 1e-6 absolute of `expected` (a failure
// names the parameter, the element and `label`); returns the largest
// difference.
double expect_same_parameters(const std::map<std::string, std::vector<double>>& expected,
                              const std::map<std::string, std::vector<double>>& got, const std::string& label) {
  double largest = 0;
  for (const auto& [name, values] : expected) {
    const auto& other = got.at(name);
    EXPECT_EQ(other.size(), values.size()) << name << ", " << label;
    for (std::size_t i = 0; i < std::min(other.size(), values.size()); ++i) {
      largest = std::max(largest, std::abs(other[i] - values[i]));
      EXPECT_NEAR(other[i], values[i], 1e-6) << name << "[" << i << "], " << label;
    }
  }
  return largest;
}

TEST(NcclCommunicator, CollectivesAtWorldSizeOne) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-collectives");
  auto comm = make_nccl_communicator(world_of_one(folder));
  EXPECT_EQ(comm->kind(), "nccl");
  EXPECT_FALSE(std::filesystem::exists(folder / "rendezvous")) << "rank 0 removes the used id";
  Context ctx(Device::cuda(0));
  Tensor sum = Tensor::from_values({1.5, -2, 3}, {3}, DType::f32, Device::cuda(0));
  Tensor mean = sum.clone();
  comm->all_reduce(ctx, sum, Reduction::sum);
  comm->all_reduce(ctx, mean, Reduction::average);
  comm->broadcast(ctx, mean, 0);
  comm->synchronize();
  EXPECT_EQ(sum.to_values(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(mean.to_values(), (std::vector<double>{1.5, -2, 3}));
  comm->barrier();
  Tensor on_cpu({3});
  try {
    comm->all_reduce(ctx, on_cpu, Reduction::sum);
    FAIL() << "a CPU buffer was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the communicator works on cuda:0"), std::string::npos) << e.what();
  }
}

// The data-parallel step through NCCL at world size 1 (several buckets, all
// reduced during backward on NCCL's stream, then unpacked) must give the
// plain step's parameters: averaging over one rank changes nothing, so the
// tolerance is 1e-6 absolute and the difference expected is 0.
TEST(NcclCommunicator, WorldSizeOneTrainsThePlainPathsParameters) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-train");
  const int steps = 6;
  const auto plain = train(steps, nullptr, 0);
  for (std::size_t bucket_bytes : {std::size_t{1024}, GradientBuckets::kDefaultBucketBytes}) {
    auto comm = make_nccl_communicator(world_of_one(folder));
    const auto through_nccl = train(steps, comm.get(), bucket_bytes);
    const double largest =
        expect_same_parameters(plain, through_nccl, "buckets of " + std::to_string(bucket_bytes) + " B");
    std::printf("buckets of %zu B: largest parameter difference after %d steps: %g\n", bucket_bytes, steps, largest);
  }
}

// The same through NCCL with every step after the first replayed from a
// CUDA graph that holds the bucket all-reduces (recorded on NCCL's stream,
// joined back before clipping). Same tolerance, difference expected 0.
TEST(NcclCommunicator, AStepGraphWithTheAllReducesTrainsThePlainPathsParameters) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-graph");
  const int steps = 6;
  const auto plain = train(steps, nullptr, 0);
  auto comm = make_nccl_communicator(world_of_one(folder));
  const auto replayed = train(steps, comm.get(), 1024, /*cuda_graph=*/true);
  comm->synchronize();  // waits for the last mark: the replayed steps are done
  const double largest = expect_same_parameters(plain, replayed, "replayed steps");
  std::printf("replayed steps: largest parameter difference after %d steps: %g\n", steps, largest);
  // An eager collective after the replayed steps still works on the same communicator.
  Context ctx(Device::cuda(0));
  Tensor values = Tensor::from_values({2, 4}, {2}, DType::f32, Device::cuda(0));
  comm->all_reduce(ctx, values, Reduction::average);
  comm->synchronize();
  EXPECT_EQ(values.to_values(), (std::vector<double>{2, 4}));
}

// Rank 1 of 2 never starts: rank 0 must give up joining within its timeout
// (aborting NCCL) with an error that says so, instead of waiting forever.
TEST(NcclCommunicator, AMissingRankEndsInAnErrorWithinTheTimeout) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-missing");
  NcclSetup setup = world_of_one(folder, 3);
  setup.world_size = 2;
  const auto start = std::chrono::steady_clock::now();
  try {
    make_nccl_communicator(setup);
    FAIL() << "joined a world of 2 alone";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("waited more than 3"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
}

TEST(NcclCommunicator, ARankWithoutAnIdToReadTimesOut) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-no-id");
  NcclSetup setup = world_of_one(folder, 1);
  setup.world_size = 2;
  setup.rank = 1;
  try {
    make_nccl_communicator(setup);
    FAIL() << "rank 1 went on without rank 0's id";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 did not publish its id"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plexus::distributed

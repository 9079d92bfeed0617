// Data-parallel training on the CPU, ranks as threads: N ranks with batch B
// (sharded sampler, bucketed averaged gradients, clipping, Adam) follow one
// rank with batch N * B, and the replica check catches ranks that drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "distributed/rank_threads.h"
#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/distributed/agreement.h"
#include "plexus/data/image_folder.h"
#include "plexus/data/patch_sampler.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/replicas.h"
#include "plexus/grad_clip.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"

namespace plexus::distributed {
namespace {

using testing::all_succeeded;
using testing::run_ranks;

const Registry registry = builtin_registry();
constexpr int kPatch = 16;
constexpr std::uint64_t kSeed = 3;

// A two-convolution autoencoder without noise: its loss on a batch is the
// mean over the batch, so the mean of the ranks' gradients is the gradient
// of the whole batch.
ModelSpec conv_spec() {
  ModelSpec spec;
  spec.name = "tiny_conv";
  spec.add_input("image")
      .add_node({"encode", "Conv2d", {"image"}, {"y"}, {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}})
      .add_node({"relu", "ReLU", {"y"}, {"a"}, {}})
      .add_node({"decode", "Conv2d", {"a"}, {"x_hat"}, {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}}})
      .add_node({"mse", "MSELoss", {"x_hat", "image"}, {"loss"}, {}});
  return spec;
}

using Values = std::map<std::string, std::vector<double>>;

Values values_of(Net& net) {
  Values values;
  for (const auto& p : net.trainable_parameters()) values[p.name] = p.parameter->value.to_values();
  return values;
}

// `steps` steps of batch `batch` on rank `rank` of `communicator` (none: one
// process, the plain path).
Values train(int batch, int steps, Communicator* communicator) {
  data::ImageFolder images(std::string(PLEXUS_SOURCE_DIR) + "/data/train-sample");
  const data::Shard shard{communicator ? communicator->rank() : 0, communicator ? communicator->world_size() : 1};
  const data::PatchSampler sampler(kSeed, batch, kPatch, shard);
  Net net(conv_spec(), registry, {{"image", {batch, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(),
          kSeed + static_cast<std::uint64_t>(shard.rank));  // ranks start apart: the broadcast must align them
  Context ctx;
  Adam adam(0.01);
  GradientClipper clipper(0.05);  // small enough to act on these gradients
  const auto parameters = net.trainable_parameters();
  std::unique_ptr<GradientBuckets> buckets;
  if (communicator) {
    broadcast_parameters(ctx, *communicator, net.parameters());
    buckets = std::make_unique<GradientBuckets>(net, *communicator, 512);  // several buckets
  }
  for (int step = 0; step < steps; ++step) {
    net.input("image").copy_from(sampler.make_batch(images, step));
    net.zero_grad();
    net.forward(ctx);
    net.backward(ctx, {{"loss", 1.0}});
    if (buckets) buckets->finish(ctx);
    clipper.clip(ctx, parameters);
    adam.step(ctx, parameters);
  }
  if (communicator) check_replicas_agree(ctx, *communicator, net.parameters(), steps);
  return values_of(net);
}

// Plain path: parameters after k steps with batch N * B from seed kSeed
// (rank 0's initial weights, which the broadcast gives every rank).
// Tolerance: 1e-6 absolute (measured: 1.5e-8) on weights of magnitude ~0.1-0.3; the two runs
// differ only in the order of float sums (per-rank means averaged vs one
// mean over the whole batch), about 1e-7 relative per step.
TEST(DataParallelTraining, NRanksWithBatchBFollowOneRankWithBatchNB) {
  set_cpu_threads(1);
  const int per_rank = 2, steps = 4;
  for (int world : {2, 4}) {
    const Values single = train(world * per_rank, steps, nullptr);
    std::vector<Values> ranks(world);
    auto errors = run_ranks(world, [&](int rank, Communicator& comm) { ranks[rank] = train(per_rank, steps, &comm); });
    std::string error;
    ASSERT_TRUE(all_succeeded(errors, &error)) << error;
    double largest = 0, moved = 0;
    for (const auto& [name, expected] : single) {
      const auto& got = ranks[0].at(name);
      ASSERT_EQ(got.size(), expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        largest = std::max(largest, std::abs(got[i] - expected[i]));
        EXPECT_NEAR(got[i], expected[i], 1e-6) << world << " ranks: " << name << "[" << i << "]";
      }
      for (int rank = 1; rank < world; ++rank) EXPECT_EQ(ranks[rank].at(name), got) << "rank " << rank << " " << name;
    }
    // The runs really trained: Adam moved the weights by far more than the tolerance.
    Net initial(conv_spec(), registry, {{"image", {1, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(), kSeed);
    for (const auto& [name, start] : values_of(initial))
      for (std::size_t i = 0; i < start.size(); ++i) moved = std::max(moved, std::abs(single.at(name)[i] - start[i]));
    EXPECT_GT(moved, 1000 * 1e-6);
    RecordProperty("largest_difference_" + std::to_string(world), ::testing::PrintToString(largest));
  }
  set_cpu_threads(0);
}

// A rank whose parameters differ from rank 0's stops every rank with an
// error naming it.
TEST(DataParallelTraining, TheReplicaCheckNamesARankThatDrifted) {
  auto errors = run_ranks(3, [&](int rank, Communicator& comm) {
    Net net(conv_spec(), registry, {{"image", {1, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(), kSeed);
    Context ctx;
    check_replicas_agree(ctx, comm, net.parameters(), 10);  // equal seeds: equal replicas
    if (rank == 2) {
      Tensor& bias = net.layer("decode").parameter("bias").value;
      bias.data<float>()[1] = std::nextafter(bias.data<float>()[1], 1.0f);  // one bit
    }
    check_replicas_agree(ctx, comm, net.parameters(), 11);
  });
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(errors[rank].find("after step 11 the parameters of rank(s) 2 differ from rank 0's"), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
}

// A stop asked on any one rank stops all; the time limit, the clock and the
// interval to the next agreement are rank 0's, whatever the others say.
TEST(DataParallelTraining, RanksAgreeOnStoppingAndOnRankZerosClock) {
  const int world = 3;
  std::vector<Agreement> quiet(world), one_stops(world), late_clocks(world), too_long(world), too_short(world);
  auto errors = run_ranks(world, [&](int rank, Communicator& comm) {
    Context ctx;
    const double my_seconds = 100.0 + rank;     // every rank's clock differs
    const std::int64_t my_interval = 7 + rank;  // so does every rank's proposed interval
    quiet[rank] = agree(ctx, comm, false, false, my_seconds, my_interval);
    one_stops[rank] = agree(ctx, comm, rank == 2, false, my_seconds, my_interval);
    late_clocks[rank] = agree(ctx, comm, false, rank != 0, my_seconds, my_interval);  // only rank 0's limit counts
    too_long[rank] = agree(ctx, comm, false, false, my_seconds, rank == 0 ? kMaxAgreementInterval + 5 : 3);
    too_short[rank] = agree(ctx, comm, false, false, my_seconds, rank == 0 ? 0 : 3);
  });
  ASSERT_TRUE(all_succeeded(errors));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_FALSE(quiet[rank].stop) << rank;
    EXPECT_FALSE(quiet[rank].out_of_time) << rank;
    EXPECT_EQ(quiet[rank].seconds, 100.0) << rank;
    EXPECT_TRUE(one_stops[rank].stop) << rank;
    EXPECT_FALSE(late_clocks[rank].out_of_time) << rank;
    EXPECT_EQ(quiet[rank].next_interval, 7) << rank;  // rank 0's
    EXPECT_EQ(too_long[rank].next_interval, kMaxAgreementInterval) << rank;
    EXPECT_EQ(too_short[rank].next_interval, 1) << rank;
  }
}

// Agreements about every `seconds`: the steps in it at the measured pace.
TEST(DataParallelTraining, AgreementIntervalIsTheStepsInTheGivenTime) {
  EXPECT_EQ(agreement_interval(0.25, 0.004), 63);  // 62.5 steps of 4 ms, rounded
  EXPECT_EQ(agreement_interval(0.25, 0.1), 3);     // 2.5, rounded away from zero
  EXPECT_EQ(agreement_interval(0.25, 2.0), 1);     // slower than the time: every step
  EXPECT_EQ(agreement_interval(0.25, 1e-9), kMaxAgreementInterval);
  EXPECT_EQ(agreement_interval(0.25, 0.0), 10);  // pace not known yet
  EXPECT_EQ(agreement_interval(0.25, -1.0), 10);
  EXPECT_EQ(agreement_interval(0.25, std::nan("")), 10);
  EXPECT_EQ(agreement_interval(0.25, std::numeric_limits<double>::infinity()), 10);
}

TEST(DataParallelTraining, BroadcastGivesEveryRankRankZerosParameters) {
  std::vector<Values> got(3);
  auto errors = run_ranks(3, [&](int rank, Communicator& comm) {
    Net net(conv_spec(), registry, {{"image", {1, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(), 40 + rank);
    Context ctx;
    broadcast_parameters(ctx, comm, net.parameters());
    got[rank] = values_of(net);
  });
  ASSERT_TRUE(all_succeeded(errors));
  Net rank0(conv_spec(), registry, {{"image", {1, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(), 40);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(got[rank], values_of(rank0)) << rank;
}

}  // namespace
}  // namespace plexus::distributed

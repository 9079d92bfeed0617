// Gradient buckets: which parameters share a bucket, when each bucket is
// reduced during backward, and that the reduced gradients are the mean of
// the ranks' own gradients (computed here one rank at a time, without any
// communicator).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "distributed/rank_threads.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/net.h"

namespace plexus::distributed {
namespace {

using testing::all_succeeded;
using testing::run_ranks;

const Registry registry = builtin_registry();
constexpr int kBatch = 5, kIn = 4, kHidden = 6, kOut = 3;

// fc1 (weight 6x4, bias 6) -> relu -> fc2 (weight 3x6, bias 3) -> MSE.
ModelSpec two_layer_spec() {
  ModelSpec spec;
  spec.name = "two_layers";
  spec.add_input("x")
      .add_input("target")
      .add_node({"fc1", "FullyConnected", {"x"}, {"h"}, {{"out_features", kHidden}}})
      .add_node({"relu", "ReLU", {"h"}, {"a"}, {}})
      .add_node({"fc2", "FullyConnected", {"a"}, {"prediction"}, {{"out_features", kOut}}})
      .add_node({"mse", "MSELoss", {"prediction", "target"}, {"loss"}, {}});
  return spec;
}

std::unique_ptr<Net> make_net() {
  return std::make_unique<Net>(two_layer_spec(), registry,
                               std::map<std::string, Shape>{{"x", {kBatch, kIn}}, {"target", {kBatch, kOut}}},
                               DType::f32, Device::cpu(), 11);
}

// Inputs that differ per rank.
void fill_inputs(Net& net, int rank) {
  std::mt19937_64 rng(100 + rank);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> x(kBatch * kIn), y(kBatch * kOut);
  for (auto& v : x) v = dist(rng);
  for (auto& v : y) v = dist(rng);
  net.input("x").copy_from(Tensor::from_values(x, {kBatch, kIn}));
  net.input("target").copy_from(Tensor::from_values(y, {kBatch, kOut}));
}

std::vector<std::string> names_of(const GradientBuckets::Bucket& bucket) {
  std::vector<std::string> names;
  for (const auto& p : bucket.parameters) names.push_back(p.name);
  return names;
}

// Backward finishes fc2 before fc1, so fc2's parameters come first. With a
// 100-byte cap: fc2.weight (72 B) + fc2.bias (12 B) = 84 B fit; fc1.weight
// (96 B) would make 180 B, so it opens bucket 1; fc1.bias (24 B) would make
// 120 B, so bucket 2. A cap of 25 MB holds everything in one bucket.
TEST(GradientBuckets, GroupsParametersInReverseExecutionOrderUpToTheCap) {
  auto net = make_net();
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets small(*net, comm, 100);
    ASSERT_EQ(small.buckets().size(), 3u);
    EXPECT_EQ(names_of(small.buckets()[0]), (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
    EXPECT_EQ(names_of(small.buckets()[1]), (std::vector<std::string>{"fc1.weight"}));
    EXPECT_EQ(names_of(small.buckets()[2]), (std::vector<std::string>{"fc1.bias"}));
    EXPECT_EQ(small.buckets()[0].elements, 21);
    GradientBuckets large(*net, comm);
    ASSERT_EQ(large.buckets().size(), 1u);
    EXPECT_EQ(large.buckets()[0].elements, 6 * 4 + 6 + 3 * 6 + 3);
  });
  std::string error;
  EXPECT_TRUE(all_succeeded(errors, &error)) << error;
}

// Records the order of node backward ends and all-reduces.
class EventLog : public NodeObserver {
 public:
  void before(const std::string& node, const std::string&, bool backward) override {
    if (backward) events.push_back("begin " + node);
  }
  void after(const std::string&, const std::string&, bool) override {}
  std::vector<std::string> events;
};

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(Communicator& inner, EventLog& log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string kind() const override { return "recording"; }
  void all_reduce(Context& ctx, Tensor& buffer, Reduction reduction) override {
    log_.events.push_back("all_reduce " + std::to_string(buffer.numel()));
    inner_.all_reduce(ctx, buffer, reduction);
  }
  void broadcast(Context& ctx, Tensor& buffer, int root) override { inner_.broadcast(ctx, buffer, root); }
  void join(Context& ctx) override { inner_.join(ctx); }
  void synchronize() override { inner_.synchronize(); }
  void barrier() override { inner_.barrier(); }
  void mark_step(Context& ctx) override { inner_.mark_step(ctx); }

 private:
  Communicator& inner_;
  EventLog& log_;
};

// Each bucket is reduced once per step, as soon as its last gradient is
// final: fc2's bucket before fc1's backward starts, fc1's two right after it.
// The last gradients backward finishes get a bucket of their own, within
// the final cap. A 250-byte cap would hold all 204 bytes; with a 30-byte
// final cap fc1.bias (24 B) is alone (fc1.weight, 96 B more, would exceed
// it) and the rest share one bucket. A final cap smaller than the last
// gradient still gives it a bucket; one of 120 B takes both of fc1's.
TEST(GradientBuckets, TheLastGradientsGetASmallBucketOfTheirOwn) {
  auto net = make_net();
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets capped(*net, comm, 250, 30);
    ASSERT_EQ(capped.buckets().size(), 2u);
    EXPECT_EQ(names_of(capped.buckets()[0]), (std::vector<std::string>{"fc2.weight", "fc2.bias", "fc1.weight"}));
    EXPECT_EQ(names_of(capped.buckets()[1]), (std::vector<std::string>{"fc1.bias"}));
    GradientBuckets tiny(*net, comm, 250, 1);
    ASSERT_EQ(tiny.buckets().size(), 2u);
    EXPECT_EQ(names_of(tiny.buckets()[1]), (std::vector<std::string>{"fc1.bias"}));
    GradientBuckets both(*net, comm, 250, 120);
    ASSERT_EQ(both.buckets().size(), 2u);
    EXPECT_EQ(names_of(both.buckets()[0]), (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
    EXPECT_EQ(names_of(both.buckets()[1]), (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
    const std::string refused = testing::error_of<ConfigError>([&] { GradientBuckets(*net, comm, 250, 0); });
    EXPECT_NE(refused.find("the final gradient bucket's size must be > 0 bytes"), std::string::npos) << refused;
  });
  std::string error;
  EXPECT_TRUE(all_succeeded(errors, &error)) << error;
}

TEST(GradientBuckets, ReducesEachBucketOncePerStepAsSoonAsItsGradientsAreFinal) {
  auto net = make_net();
  fill_inputs(*net, 0);
  auto errors = run_ranks(1, [&](int, Communicator& inner) {
    EventLog log;
    RecordingCommunicator comm(inner, log);
    net->set_observer(&log);
    GradientBuckets buckets(*net, comm, 100);
    Context ctx;
    for (int step = 0; step < 3; ++step) {
      log.events.clear();
      net->zero_grad();
      net->forward(ctx);
      net->backward(ctx, {{"loss", 1.0}});
      buckets.finish(ctx);
      EXPECT_EQ(log.events, (std::vector<std::string>{"begin mse", "begin fc2", "all_reduce 21", "begin relu",
                                                      "begin fc1", "all_reduce 24", "all_reduce 6"}))
          << "step " << step;
      EXPECT_EQ(buckets.last_pass_order(), (std::vector<int>{0, 1, 2}));
      EXPECT_EQ(buckets.last_pass_issued_during_backward(), 3);
      EXPECT_EQ(buckets.reductions_issued(), 3 * (step + 1));
    }
    net->set_observer(nullptr);
  });
  std::string error;
  EXPECT_TRUE(all_succeeded(errors, &error)) << error;
}

// The buckets take over the gradients: each becomes a view into its
// bucket's buffer, in packing order, with its values kept.
TEST(GradientBuckets, TheGradientsLiveInTheirBucketsBuffersWithTheirValues) {
  auto net = make_net();
  fill_inputs(*net, 0);
  Context ctx;
  net->zero_grad();
  net->forward(ctx);
  net->backward(ctx, {{"loss", 1.0}});
  std::map<std::string, std::vector<double>> before;
  for (const auto& p : net->trainable_parameters()) before[p.name] = p.parameter->grad.to_values();
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets buckets(*net, comm, 100);
    for (const auto& bucket : buckets.buckets()) {
      const auto* start = static_cast<const char*>(bucket.parameters.front().parameter->grad.raw_data());
      std::size_t offset = 0;
      for (const auto& p : bucket.parameters) {
        EXPECT_EQ(static_cast<const char*>(p.parameter->grad.raw_data()), start + offset) << p.name;
        offset += p.parameter->grad.nbytes();
        EXPECT_EQ(p.parameter->grad.to_values(), before.at(p.name)) << p.name;
      }
    }
  });
  std::string error;
  EXPECT_TRUE(all_succeeded(errors, &error)) << error;
}

// A gradient tensor replaced after the buckets were built would silently
// miss the reduction: reducing its bucket is an error that names it.
TEST(GradientBuckets, AGradientReallocatedAfterwardsIsAnErrorNamingIt) {
  auto net = make_net();
  fill_inputs(*net, 0);
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets buckets(*net, comm, 100);
    net->layer("fc1").parameter("bias").grad = Tensor({kHidden});
    Context ctx;
    net->zero_grad();
    net->forward(ctx);
    try {
      net->backward(ctx, {{"loss", 1.0}});
      buckets.finish(ctx);
      ADD_FAILURE() << "a reallocated gradient was reduced";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the gradient of fc1.bias was reallocated"), std::string::npos) << e.what();
    }
  });
  EXPECT_TRUE(all_succeeded(errors));
}

// Without a backward pass the hook never fires: finish() still reduces every
// bucket, in order, so all ranks issue the same collectives.
TEST(GradientBuckets, FinishReducesTheBucketsBackwardDidNotReach) {
  auto net = make_net();
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets buckets(*net, comm, 100);
    Context ctx;
    buckets.finish(ctx);
    EXPECT_EQ(buckets.last_pass_order(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(buckets.last_pass_issued_during_backward(), 0);
  });
  EXPECT_TRUE(all_succeeded(errors));
}

// After finish(), every rank holds the mean over the ranks of the gradients
// each rank computed on its own inputs.
TEST(GradientBuckets, EveryRankEndsWithTheMeanOfTheRanksGradients) {
  set_cpu_threads(1);
  for (int world : {2, 3, 4}) {
    // The reference: each rank's gradients on its own, no communicator.
    std::map<std::string, std::vector<double>> mean;
    for (int rank = 0; rank < world; ++rank) {
      auto net = make_net();
      fill_inputs(*net, rank);
      Context ctx;
      net->zero_grad();
      net->forward(ctx);
      net->backward(ctx, {{"loss", 1.0}});
      for (const auto& p : net->trainable_parameters()) {
        auto values = p.parameter->grad.to_values();
        auto& sum = mean[p.name];
        sum.resize(values.size(), 0.0);
        for (std::size_t i = 0; i < values.size(); ++i) sum[i] += values[i] / world;
      }
    }
    std::vector<std::map<std::string, std::vector<double>>> reduced(world);
    auto errors = run_ranks(world, [&](int rank, Communicator& comm) {
      auto net = make_net();
      fill_inputs(*net, rank);
      GradientBuckets buckets(*net, comm, 100);
      Context ctx;
      net->zero_grad();
      net->forward(ctx);
      net->backward(ctx, {{"loss", 1.0}});
      buckets.finish(ctx);
      for (const auto& p : net->trainable_parameters()) reduced[rank][p.name] = p.parameter->grad.to_values();
    });
    std::string error;
    ASSERT_TRUE(all_succeeded(errors, &error)) << error;
    for (int rank = 0; rank < world; ++rank)
      for (const auto& [name, expected] : mean) {
        const auto& got = reduced[rank].at(name);
        ASSERT_EQ(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          EXPECT_NEAR(got[i], expected[i], 1e-6 * std::max(1.0, std::abs(expected[i])))
              << "world " << world << ", rank " << rank << ", " << name << "[" << i << "]";
      }
  }
  set_cpu_threads(0);
}

// Net's hook fires once per node per backward, in reverse execution order,
// also for a node no loss depends on (its gradients stay zero but are
// final), so a bucket holding its parameters is still reduced in backward.
TEST(GradientBuckets, NetsHookFiresForEveryNodeIncludingOnesNoLossReaches) {
  ModelSpec spec = two_layer_spec();
  spec.nodes.insert(spec.nodes.begin() + 1, {"side", "FullyConnected", {"x"}, {"unused"}, {{"out_features", 2}}});
  Net net(spec, registry, {{"x", {kBatch, kIn}}, {"target", {kBatch, kOut}}});
  ASSERT_EQ(net.execution_order(), (std::vector<std::string>{"fc1", "side", "relu", "fc2", "mse"}));
  fill_inputs(net, 0);
  std::vector<std::string> fired;
  net.set_gradients_ready_hook([&](Context&, const std::string& node) { fired.push_back(node); });
  Context ctx;
  for (int pass = 0; pass < 2; ++pass) {
    fired.clear();
    net.zero_grad();
    net.forward(ctx);
    net.backward(ctx, {{"loss", 1.0}});
    EXPECT_EQ(fired, (std::vector<std::string>{"mse", "fc2", "relu", "side", "fc1"})) << "pass " << pass;
  }
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    GradientBuckets buckets(net, comm, 100);  // replaces the hook above
    net.zero_grad();
    net.forward(ctx);
    net.backward(ctx, {{"loss", 1.0}});
    buckets.finish(ctx);
    EXPECT_EQ(buckets.last_pass_issued_during_backward(), static_cast<int>(buckets.buckets().size()));
  });
  EXPECT_TRUE(all_succeeded(errors));
}

TEST(GradientBuckets, RejectsAnF64Net) {
  Net net(two_layer_spec(), registry, {{"x", {kBatch, kIn}}, {"target", {kBatch, kOut}}}, DType::f64);
  auto errors = run_ranks(1, [&](int, Communicator& comm) { GradientBuckets buckets(net, comm); });
  EXPECT_NE(errors[0].find("f32 gradients; the net is f64"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace plexus::distributed

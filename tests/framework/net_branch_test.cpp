// Net::backward on CUDA lets the convolutions' parameter gradients, which
// run on a stream branch (cuda::Branch), go on beside the next nodes'
// backward (Context::DeferredJoins), yet a gradients-ready hook that joins
// the branches, and the gradient buckets of data-parallel training, must
// see a node's gradients complete: here the hook (or the bucket's
// all-reduce) copies the first convolution's weight gradient with work
// enqueued on the context's stream at that moment, and the copy must equal
// the gradient once backward has returned. That convolution reads the model
// input, so it has no input gradient to compute beside its weight gradient:
// without the join the copy would run while the weight gradient is still
// being summed. The same backward without a hook gives the same gradients
// (to the rounding of the atomic sums some layers use). CUDA only; skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plexus/builtin_layers.h"
#include "plexus/distributed/communicator.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/net.h"
#include "plexus/registry.h"
#include "plexus/tensor_ops.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

ModelSpec bls2017() { return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bls2017.json"); }

const Shape kImage = {8, 3, 256, 256};

// bls2017's forward and backward on one fixed image batch.
void forward_backward(Context& ctx, Net& net) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(kImage)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 + 0.5 * std::sin(0.013 * i);
  net.input("image").copy_from(Tensor::from_values(values, kImage, DType::f32));
  ctx.reseed(7);
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"mse", 0.01 * 255 * 255}, {"bpp", 1.0}});
}

// forward_backward with `hook` as the net's gradients-ready hook. Returns
// every parameter gradient's values.
std::vector<std::vector<double>> backward(Context& ctx, Net& net, const Net::GradientsReadyHook& hook) {
  net.set_gradients_ready_hook(hook);
  forward_backward(ctx, net);
  ctx.synchronize();
  std::vector<std::vector<double>> result;
  for (const NamedParameter& named : net.parameters()) result.push_back(named.parameter->grad.to_values());
  return result;
}

TEST(NetBranch, TheGradientsReadyHookSeesTheConvolutionsWeightGradientCompleteCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  for (Precision precision : {Precision::bf16, Precision::f32}) {
    SCOPED_TRACE(precision_name(precision));
    Context ctx(Device::cuda());
    ctx.set_precision(precision);
    Net net(bls2017(), registry, {{"image", kImage}}, DType::f32, Device::cuda(), 5);
    const Tensor& weight_grad = net.layer("g_a0").parameter("weight").grad;
    Tensor snapshot(weight_grad.shape(), DType::f32, Device::cuda());
    const auto with_hook = backward(ctx, net, [&](Context& hook_ctx, const std::string& node) {
      // Copied on the context's stream: the legacy stream would wait for every stream.
      if (node != "g_a0") return;
      hook_ctx.join_branches();
      copy_elements(hook_ctx, snapshot, 0, weight_grad, 0, weight_grad.numel());
    });
    const std::vector<double> copied = snapshot.to_values(), final_grad = weight_grad.to_values();
    ASSERT_EQ(copied.size(), final_grad.size());
    double largest = 0;
    for (std::size_t i = 0; i < copied.size(); ++i) {
      ASSERT_EQ(copied[i], final_grad[i]) << "element " << i << " of g_a0's weight gradient";
      largest = std::max(largest, std::abs(final_grad[i]));
    }
    EXPECT_GT(largest, 0.0) << "the weight gradient is all zeros: the test compares nothing";

    // The bias and entropy-model gradients sum blocks' partials with
    // atomics, so two backward passes agree to rounding, not bit for bit.
    const auto without_hook = backward(ctx, net, nullptr);
    ASSERT_EQ(without_hook.size(), with_hook.size());
    for (std::size_t p = 0; p < with_hook.size(); ++p) {
      double scale = 0;
      for (double value : with_hook[p]) scale = std::max(scale, std::abs(value));
      for (std::size_t i = 0; i < with_hook[p].size(); ++i)
        ASSERT_NEAR(with_hook[p][i], without_hook[p][i], 1e-5 * scale) << "parameter " << p << ", element " << i;
    }
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

// One bucket holds every gradient, so it is reduced when the first
// convolution (the last node of backward) is ready: what the all-reduce
// reads must be the final gradients.
TEST(NetBranch, TheGradientBucketsReduceTheConvolutionsWeightGradientCompleteCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  for (Precision precision : {Precision::bf16, Precision::f32}) {
    SCOPED_TRACE(precision_name(precision));
    Context ctx(Device::cuda());
    ctx.set_precision(precision);
    Net net(bls2017(), registry, {{"image", kImage}}, DType::f32, Device::cuda(), 5);
    SnapshotCommunicator communicator;
    const std::size_t all = std::size_t{1} << 30;  // the final bucket too: no small bucket of its own
    distributed::GradientBuckets buckets(net, communicator, all, all);
    ASSERT_EQ(buckets.buckets().size(), 1u);
    forward_backward(ctx, net);
    buckets.finish(ctx);
    ctx.synchronize();
    ASSERT_EQ(buckets.last_pass_issued_during_backward(), 1);
    ASSERT_EQ(communicator.snapshots.size(), 1u);
    const std::vector<double> reduced = communicator.snapshots[0].to_values();
    std::size_t offset = 0;
    for (const NamedParameter& named : buckets.buckets()[0].parameters) {
      const std::vector<double> final_grad = named.parameter->grad.to_values();
      ASSERT_LE(offset + final_grad.size(), reduced.size());
      for (std::size_t i = 0; i < final_grad.size(); ++i)
        ASSERT_EQ(reduced[offset + i], final_grad[i]) << named.name << ", element " << i;
      offset += final_grad.size();
    }
    EXPECT_EQ(offset, reduced.size());
  }
}

}  // namespace
}  // namespace plexus

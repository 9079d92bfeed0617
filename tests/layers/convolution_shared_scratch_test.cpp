// The convolutions of a context share their CUDA scratch (packed weights,
// NHWC copies, partial sums, im2col columns: Context::shared_state). A net
// of convolutions of different shapes, on the tensor-core engine (tf32,
// bf16) and on im2col + cuBLAS (f32), must compute on CUDA what it computes
// on the CPU, and the same again after a larger net on the same context has
// left its own data in every shared buffer (a pass must fill what it reads).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

json conv(int out, int kernel, int stride) {
  return {{"out_channels", out}, {"kernel", kernel}, {"stride", stride}, {"padding", kernel / 2}};
}
json deconv(int out) {
  return {{"out_channels", out}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}};
}

// 3 -> 32 -> 48 -> 32 channels down to a quarter, then back up to 3: the
// few-channel passes next to the image and the engine's in between.
ModelSpec convolutions() {
  ModelSpec spec;
  spec.add_input("image")
      .add_node({"c0", "Conv2d", {"image"}, {"a0"}, conv(32, 5, 2)})
      .add_node({"r0", "ReLU", {"a0"}, {"b0"}, json::object()})
      .add_node({"c1", "Conv2d", {"b0"}, {"a1"}, conv(48, 3, 1)})
      .add_node({"r1", "ReLU", {"a1"}, {"b1"}, json::object()})
      .add_node({"c2", "Conv2d", {"b1"}, {"a2"}, conv(32, 5, 2)})
      .add_node({"t0", "ConvTranspose2d", {"a2"}, {"a3"}, deconv(32)})
      .add_node({"r2", "ReLU", {"a3"}, {"b3"}, json::object()})
      .add_node({"t1", "ConvTranspose2d", {"b3"}, {"x_hat"}, deconv(3)})
      .add_node({"mse", "MSELoss", {"x_hat", "image"}, {"loss"}, json::object()});
  return spec;
}

Tensor random_image(const Shape& shape, std::uint64_t seed, Device device) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = unit(rng);
  return Tensor::from_values(values, shape, DType::f32, device);
}

// The parameter gradients of one forward and backward.
std::vector<std::vector<double>> gradients(Net& net, Context& ctx) {
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"loss", 1.0}});
  std::vector<std::vector<double>> result;
  for (const auto& p : net.parameters()) result.push_back(p.parameter->grad.to_values());
  return result;
}

// Largest |a - b| over a tensor, relative to the largest |a| of that tensor.
double worst_relative(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    double scale = 1e-12, difference = 0;
    for (std::size_t i = 0; i < a[t].size(); ++i) {
      scale = std::max(scale, std::abs(a[t][i]));
      difference = std::max(difference, std::abs(a[t][i] - b[t][i]));
    }
    worst = std::max(worst, difference / scale);
  }
  return worst;
}

TEST(ConvolutionSharedScratch, CudaMatchesTheCpuAndStaysTheSameAfterALargerNetUsedTheScratch) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Registry registry = builtin_registry();
  const Shape small{2, 3, 32, 24}, large{2, 3, 64, 64};
  Net cpu(convolutions(), registry, {{"image", small}}, DType::f32, Device::cpu(), 5);
  cpu.input("image").copy_from(random_image(small, 1, Device::cpu()));
  Context cpu_ctx;
  const auto expected = gradients(cpu, cpu_ctx);
  // Products on TF32 or BF16 tensor cores round the operands (11 and 8
  // significant bits), through five layers whose ReLU gates the rounding
  // may flip: against the exact CPU, 5% of each tensor's largest gradient
  // for both (strict f32: 1e-4).
  for (auto [precision, tolerance] :
       {std::pair{Precision::f32, 1e-4}, std::pair{Precision::tf32, 5e-2}, std::pair{Precision::bf16, 5e-2}}) {
    Context ctx(Device::cuda(0));
    ctx.set_precision(precision);
    Net gpu(convolutions(), registry, {{"image", small}}, DType::f32, Device::cuda(0), 5);
    gpu.input("image").copy_from(random_image(small, 1, Device::cuda(0)));
    const auto first = gradients(gpu, ctx);
    Net larger(convolutions(), registry, {{"image", large}}, DType::f32, Device::cuda(0), 9);
    larger.input("image").copy_from(random_image(large, 2, Device::cuda(0)));
    gradients(larger, ctx);  // fills the shared buffers with its own data
    const auto again = gradients(gpu, ctx);
    const double against_cpu = worst_relative(expected, first), between_passes = worst_relative(first, again);
    std::printf("[ info ] %s: against the CPU %.3g, second pass against first %.3g\n", precision_name(precision),
                against_cpu, between_passes);
    EXPECT_LE(against_cpu, tolerance) << precision_name(precision);
    // The same work on the same data: only the order of atomic additions
    // (bias gradients) may differ.
    EXPECT_LE(between_passes, 1e-5) << precision_name(precision);
  }
}

}  // namespace
}  // namespace plexus

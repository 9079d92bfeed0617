// A whole autoencoder-shaped net on CPU and CUDA with identical parameters:
// losses, every parameter gradient, and the parameters after one Adam step
// must agree (f32). Eval mode, so the latent is rounded rather than noised
// and both devices compute the same function.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

ModelSpec small_autoencoder() {
  ModelSpec spec;
  spec.add_input("image")
      .add_node(
          {"g_a0", "Conv2d", {"image"}, {"a0"}, {{"out_channels", 8}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"gdn0", "GDN", {"a0"}, {"a1"}, json::object()})
      .add_node({"g_a1", "Conv2d", {"a1"}, {"y"}, {{"out_channels", 6}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"quantize", "UniformNoise", {"y"}, {"y_hat"}, json::object()})
      .add_node({"entropy", "FactorizedEntropyModel", {"y_hat"}, {"likelihoods"}, json::object()})
      .add_node({"g_s0",
                 "ConvTranspose2d",
                 {"y_hat"},
                 {"s0"},
                 {{"out_channels", 8}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"igdn0", "IGDN", {"s0"}, {"s1"}, json::object()})
      .add_node({"g_s1",
                 "ConvTranspose2d",
                 {"s1"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"distortion", "MSELoss", {"x_hat", "image"}, {"mse"}, json::object()})
      .add_node({"rate", "RateLoss", {"likelihoods", "image"}, {"bpp"}, json::object()});
  return spec;
}

double relative(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-3}); }

TEST(NetParity, AutoencoderTrainStepCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Registry registry = builtin_registry();
  const std::map<std::string, Shape> shapes = {{"image", {2, 3, 32, 24}}};
  Net cpu(small_autoencoder(), registry, shapes, DType::f32, Device::cpu(), 5);
  Net gpu(small_autoencoder(), registry, shapes, DType::f32, Device::cuda(0), 5);
  // Same seed, same parameters; check rather than assume.
  auto cpu_params = cpu.parameters();
  auto gpu_params = gpu.parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (std::size_t i = 0; i < cpu_params.size(); ++i)
    ASSERT_EQ(cpu_params[i].parameter->value.to_values(), gpu_params[i].parameter->value.to_values())
        << cpu_params[i].name;

  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> image(2 * 3 * 32 * 24);
  for (auto& v : image) v = unit(rng);
  cpu.input("image").copy_from(Tensor::from_values(image, shapes.at("image")));
  gpu.input("image").copy_from(Tensor::from_values(image, shapes.at("image"), DType::f32, Device::cuda(0)));

  Context cpu_ctx(Device::cpu(), 1), gpu_ctx(Device::cuda(0), 1);
  cpu_ctx.set_training(false);
  gpu_ctx.set_training(false);
  const std::map<std::string, double> weights = {{"mse", 0.01 * 255 * 255}, {"bpp", 1.0}};
  Adam cpu_adam(1e-3), gpu_adam(1e-3);
  for (Net* net : {&cpu, &gpu}) net->zero_grad();
  cpu.forward(cpu_ctx);
  gpu.forward(gpu_ctx);
  EXPECT_LT(relative(cpu.scalar("mse"), gpu.scalar("mse")), 1e-4);
  EXPECT_LT(relative(cpu.scalar("bpp"), gpu.scalar("bpp")), 1e-4);
  cpu.backward(cpu_ctx, weights);
  gpu.backward(gpu_ctx, weights);
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    std::vector<double> a = cpu_params[i].parameter->grad.to_values(), b = gpu_params[i].parameter->grad.to_values();
    double scale = 0.0;
    for (double v : a) scale = std::max(scale, std::abs(v));
    for (std::size_t j = 0; j < a.size(); ++j)
      ASSERT_LE(std::abs(a[j] - b[j]), 1e-3 * std::max(scale, 1e-6)) << cpu_params[i].name << "[" << j << "]";
  }
  // Adam's first step moves each weight by about lr * g / |g|: where a gradient
  // is ~0 relative to its tensor, rounding may flip its sign on one device,
  // so there the two may differ by up to 2 lr; elsewhere they must agree.
  std::vector<std::vector<double>> grads;
  for (auto& p : cpu_params) grads.push_back(p.parameter->grad.to_values());
  cpu_adam.step(cpu_ctx, cpu_params);
  gpu_adam.step(gpu_ctx, gpu_params);
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    std::vector<double> a = cpu_params[i].parameter->value.to_values(), b = gpu_params[i].parameter->value.to_values();
    double scale = 0.0;
    for (double g : grads[i]) scale = std::max(scale, std::abs(g));
    for (std::size_t j = 0; j < a.size(); ++j) {
      bool clear_gradient = std::abs(grads[i][j]) > 1e-2 * scale;
      double tolerance = clear_gradient ? 1e-5 + 1e-4 * std::abs(a[j]) : 2.1e-3;
      ASSERT_NEAR(a[j], b[j], tolerance) << cpu_params[i].name << "[" << j << "]";
    }
  }
}

}  // namespace
}  // namespace plexus

// GradientClipper: the global 2-norm over every parameter, scaling only when
// it exceeds the maximum (values worked out by hand); CUDA agrees with the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "plexus/error.h"
#include "plexus/grad_clip.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

struct TwoParameters {
  Parameter a, b;
  std::vector<NamedParameter> named() { return {{"a", &a}, {"b", &b}}; }
};

// Gradients a = [3, 0], b = [0, 0, 4]: global norm 5.
TwoParameters gradients_with_norm_5(Device device) {
  TwoParameters p;
  p.a.grad = Tensor::from_values({3, 0}, {2}, DType::f32, device);
  p.b.grad = Tensor::from_values({0, 0, 4}, {3}, DType::f32, device);
  return p;
}

TEST(GradientClipper, ScalesToTheMaximumNormWhenAbove) {
  TwoParameters p = gradients_with_norm_5(Device::cpu());
  Context ctx;
  GradientClipper clipper(1.0);
  clipper.clip(ctx, p.named());
  EXPECT_NEAR(clipper.last_norm(), 5.0, 1e-12);
  // factor 1 / (5 + 1e-6)
  EXPECT_NEAR(p.a.grad.to_values()[0], 0.6, 1e-6);
  EXPECT_NEAR(p.b.grad.to_values()[2], 0.8, 1e-6);
  EXPECT_EQ(p.b.grad.to_values()[0], 0.0);
}

TEST(GradientClipper, LeavesGradientsBelowTheMaximumAlone) {
  TwoParameters p = gradients_with_norm_5(Device::cpu());
  Context ctx;
  GradientClipper clipper(5.5);
  clipper.clip(ctx, p.named());
  EXPECT_EQ(p.a.grad.to_values(), (std::vector<double>{3, 0}));
  EXPECT_EQ(p.b.grad.to_values(), (std::vector<double>{0, 0, 4}));
}

TEST(GradientClipper, RejectsANonPositiveMaximum) {
  EXPECT_THROW(GradientClipper(0.0), ConfigError);
  EXPECT_THROW(GradientClipper(-1.0), ConfigError);
  EXPECT_THROW(GradientClipper(NAN), ConfigError);
}

TEST(GradientClipper, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(100000), b(77);
  for (auto& v : a) v = normal(rng);
  for (auto& v : b) v = normal(rng);
  TwoParameters cpu, gpu;
  cpu.a.grad = Tensor::from_values(a, {100000});
  cpu.b.grad = Tensor::from_values(b, {77});
  gpu.a.grad = Tensor::from_values(a, {100000}, DType::f32, Device::cuda());
  gpu.b.grad = Tensor::from_values(b, {77}, DType::f32, Device::cuda());
  Context cpu_ctx, gpu_ctx(Device::cuda());
  GradientClipper cpu_clipper(2.0), gpu_clipper(2.0);
  cpu_clipper.clip(cpu_ctx, cpu.named());
  gpu_clipper.clip(gpu_ctx, gpu.named());
  EXPECT_NEAR(gpu_clipper.last_norm(), cpu_clipper.last_norm(), 1e-6 * cpu_clipper.last_norm());
  const auto expected = cpu.a.grad.to_values(), actual = gpu.a.grad.to_values();
  for (std::size_t i = 0; i < expected.size(); i += 997) EXPECT_NEAR(actual[i], expected[i], 1e-6) << i;
  EXPECT_NEAR(gpu.b.grad.to_values()[5], cpu.b.grad.to_values()[5], 1e-6);
}

// More gradients than one launch takes (the CUDA kernels work on tables of
// up to 32), f32 and f64 interleaved, sizes from 1 to 5000: every element
// equals the CPU's, clipped or not (the expected norm is summed here in f64).
TEST(GradientClipper, CudaMatchesCpuOverManyGradientsOfBothDtypes) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (double max_norm : {3.0, 1e9}) {
    std::mt19937_64 rng(11);
    std::normal_distribution<double> normal(0.0, 0.3);
    const int count = 75;
    std::vector<Parameter> cpu(count), gpu(count);
    std::vector<NamedParameter> cpu_named, gpu_named;
    double sum_squares = 0;
    for (int k = 0; k < count; ++k) {
      const std::int64_t n = 1 + (k * 677) % 5000;
      std::vector<double> values(static_cast<std::size_t>(n));
      for (auto& v : values) {
        v = normal(rng);
        if (k % 3 != 2) v = static_cast<float>(v);  // what the f32 tensor holds
        sum_squares += v * v;
      }
      const DType dtype = k % 3 == 2 ? DType::f64 : DType::f32;
      cpu[k].grad = Tensor::from_values(values, {n}, dtype);
      gpu[k].grad = Tensor::from_values(values, {n}, dtype, Device::cuda());
      cpu_named.push_back({"p" + std::to_string(k), &cpu[k]});
      gpu_named.push_back({"p" + std::to_string(k), &gpu[k]});
    }
    Context cpu_ctx, gpu_ctx(Device::cuda());
    GradientClipper cpu_clipper(max_norm), gpu_clipper(max_norm);
    cpu_clipper.clip(cpu_ctx, cpu_named);
    gpu_clipper.clip(gpu_ctx, gpu_named);
    const double norm = std::sqrt(sum_squares);
    EXPECT_NEAR(gpu_clipper.last_norm(), norm, 1e-9 * norm) << max_norm;
    EXPECT_NEAR(cpu_clipper.last_norm(), norm, 1e-9 * norm) << max_norm;
    for (int k = 0; k < count; ++k) {
      const auto expected = cpu[k].grad.to_values(), actual = gpu[k].grad.to_values();
      ASSERT_EQ(actual.size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i)
        ASSERT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-12)
            << "max norm " << max_norm << " gradient " << k << " element " << i;
    }
  }
}

}  // namespace
}  // namespace plexus

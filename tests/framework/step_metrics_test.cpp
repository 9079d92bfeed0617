// StepMetrics: window sums and means, the last step's values, and the first
// non-finite step, against sums written out here; the CUDA record equals the
// CPU one bit for bit, also when replayed from a CUDA graph.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "plexus/step_graph.h"
#include "plexus/step_metrics.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Per step: {mse, bpp}; loss = 650.25 * mse + bpp.
const std::vector<std::vector<double>> kSteps{{0.01, 1.5}, {0.02, 1.25}, {0.015, 0.75}, {kNaN, 0.5}, {0.01, kInf}};
constexpr double kWeight = 650.25;

struct Terms {
  Tensor mse, bpp;
  Terms(DType dtype, Device device) : mse({}, dtype, device), bpp({}, dtype, device) {}
  void set(const std::vector<double>& values) {
    mse.copy_from(Tensor::from_values({values[0]}, {}, mse.dtype()));
    bpp.copy_from(Tensor::from_values({values[1]}, {}, bpp.dtype()));
  }
};

TEST(StepMetrics, WindowHoldsSumsLastValuesAndRestarts) {
  Context ctx;
  StepMetrics metrics(Device::cpu(), {kWeight, 1.0}, /*steps_before=*/10);
  Terms terms(DType::f64, Device::cpu());
  for (int k = 0; k < 2; ++k) {
    terms.set(kSteps[k]);
    metrics.record(ctx, {&terms.mse, &terms.bpp});
  }
  StepMetrics::Window peeked = metrics.peek(ctx);  // leaves the window open
  EXPECT_EQ(peeked.steps, 2);
  EXPECT_EQ(peeked.last_loss, kWeight * 0.02 + 1.25);
  StepMetrics::Window w = metrics.read(ctx);
  EXPECT_EQ(w.steps, 2);
  EXPECT_EQ(w.last_step, 12);
  EXPECT_EQ(w.loss_sum, (kWeight * 0.01 + 1.5) + (kWeight * 0.02 + 1.25));
  EXPECT_EQ(w.term_sums, (std::vector<double>{0.01 + 0.02, 1.5 + 1.25}));
  EXPECT_EQ(w.last_loss, kWeight * 0.02 + 1.25);
  EXPECT_EQ(w.last_terms, (std::vector<double>{0.02, 1.25}));
  EXPECT_EQ(w.first_bad_step, 0);

  terms.set(kSteps[2]);
  metrics.record(ctx, {&terms.mse, &terms.bpp});
  w = metrics.read(ctx);  // a new window: only step 13
  EXPECT_EQ(w.steps, 1);
  EXPECT_EQ(w.last_step, 13);
  EXPECT_EQ(w.loss_sum, kWeight * 0.015 + 0.75);
  EXPECT_EQ(metrics.read(ctx).steps, 0);
}

TEST(StepMetrics, NamesTheFirstNonFiniteStepAndKeepsIt) {
  Context ctx;
  StepMetrics metrics(Device::cpu(), {kWeight, 1.0}, /*steps_before=*/100);
  Terms terms(DType::f32, Device::cpu());
  for (const auto& step : kSteps) {
    terms.set(step);
    metrics.record(ctx, {&terms.mse, &terms.bpp});
  }
  EXPECT_EQ(metrics.first_bad_step(ctx), 104);  // the 4th step after step 100: NaN mse
  StepMetrics::Window w = metrics.read(ctx);
  EXPECT_EQ(w.first_bad_step, 104);
  EXPECT_TRUE(std::isnan(w.bad_loss));
  EXPECT_TRUE(std::isnan(w.bad_terms[0]));
  EXPECT_EQ(w.bad_terms[1], 0.5);
  EXPECT_TRUE(std::isinf(w.last_loss));              // the 5th step: infinite bpp, not the first bad one
  EXPECT_EQ(metrics.read(ctx).first_bad_step, 104);  // not reset by reading
}

TEST(StepMetrics, RejectsBadTerms) {
  Context ctx;
  EXPECT_THROW(StepMetrics(Device::cpu(), {}), ConfigError);
  EXPECT_THROW(StepMetrics(Device::cpu(), {1, 1, 1, 1, 1}), ConfigError);
  StepMetrics metrics(Device::cpu(), {1.0, 1.0});
  Tensor scalar({}, DType::f32), vector({2}, DType::f32);
  EXPECT_THROW(metrics.record(ctx, {&scalar}), Error);
  EXPECT_THROW(metrics.record(ctx, {&scalar, &vector}), ShapeError);
}

void expect_same_window(const StepMetrics::Window& a, const StepMetrics::Window& b) {
  auto same = [](double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.first_bad_step, b.first_bad_step);
  EXPECT_TRUE(same(a.loss_sum, b.loss_sum)) << a.loss_sum << " vs " << b.loss_sum;
  EXPECT_TRUE(same(a.last_loss, b.last_loss));
  EXPECT_TRUE(same(a.bad_loss, b.bad_loss));
  for (std::size_t k = 0; k < a.term_sums.size(); ++k) {
    EXPECT_TRUE(same(a.term_sums[k], b.term_sums[k])) << k;
    EXPECT_TRUE(same(a.last_terms[k], b.last_terms[k])) << k;
    EXPECT_TRUE(same(a.bad_terms[k], b.bad_terms[k])) << k;
  }
}

// The device record is the CPU record, bit for bit, eagerly and when the
// record() is replayed from a CUDA graph with new term values each step.
TEST(StepMetrics, CudaRecordEqualsCpuEagerAndReplayed) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (bool graph_on : {false, true}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      Context cpu_ctx, gpu_ctx(Device::cuda());
      StepMetrics on_cpu(Device::cpu(), {kWeight, 1.0}, 7), on_gpu(Device::cuda(), {kWeight, 1.0}, 7);
      Terms cpu_terms(dtype, Device::cpu()), gpu_terms(dtype, Device::cuda());
      StepGraph graph(graph_on);
      for (std::size_t k = 0; k < kSteps.size(); ++k) {
        cpu_terms.set(kSteps[k]);
        gpu_terms.set(kSteps[k]);
        on_cpu.record(cpu_ctx, {&cpu_terms.mse, &cpu_terms.bpp});
        graph.run(gpu_ctx, 0, [&] { on_gpu.record(gpu_ctx, {&gpu_terms.mse, &gpu_terms.bpp}); });
        if (k == 1) expect_same_window(on_gpu.read(gpu_ctx), on_cpu.read(cpu_ctx));
      }
      EXPECT_EQ(graph.recordings(), graph_on ? 1 : 0);
      EXPECT_EQ(on_gpu.first_bad_step(gpu_ctx), 7 + 4) << "graph " << graph_on << " " << dtype_name(dtype);
      expect_same_window(on_gpu.read(gpu_ctx), on_cpu.read(cpu_ctx));
    }
  }
}

}  // namespace
}  // namespace plexus

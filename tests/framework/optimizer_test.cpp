// Optimisers: SGD with momentum and Adam against the update formulas written
// out independently here, the first Adam step against its closed form, state
// round trips, and bad hyperparameters / parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "plexus/optimizer.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

// A free-standing parameter (value and gradient) for driving an optimiser.
struct TestParameter {
  Parameter parameter;
  TestParameter(const std::string& name, const std::vector<double>& values, DType dtype, Device device) {
    Shape shape{static_cast<std::int64_t>(values.size())};
    parameter.name = name;
    parameter.shape = shape;
    parameter.value = Tensor::from_values(values, shape, dtype, device);
    parameter.grad = Tensor(shape, dtype, device);
  }
  void set_grad(const std::vector<double>& g) {
    parameter.grad.copy_from(
        Tensor::from_values(g, parameter.shape, parameter.value.dtype(), parameter.value.device()));
  }
  std::vector<double> values() const { return parameter.value.to_values(); }
};

const std::vector<double> kStart{0.5, -1.25, 2.0, 0.0};
const std::vector<std::vector<double>> kGrads{
    {0.1, -0.4, 2.0, -0.01}, {0.3, 0.2, -1.0, 0.05}, {-0.2, 0.1, 0.5, 0.0}, {1.0, -1.0, 0.25, 0.3}};

TEST(Sgd, MomentumStepsMatchTheFormula) {
  const double lr = 0.1, mu = 0.9;
  TestParameter w("w", kStart, DType::f64, Device::cpu());
  Sgd sgd(lr, mu);
  Context ctx;
  std::vector<double> expected = kStart, velocity(kStart.size(), 0.0);
  for (int step = 0; step < 3; ++step) {
    w.set_grad(kGrads[step]);
    sgd.step(ctx, {{"w", &w.parameter}});
    for (std::size_t i = 0; i < expected.size(); ++i) {
      velocity[i] = mu * velocity[i] + kGrads[step][i];  // v = mu v + g
      expected[i] -= lr * velocity[i];                   // w -= lr v
    }
    std::vector<double> got = w.values();
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-15) << "step " << step;
  }
  EXPECT_EQ(sgd.steps_taken(), 3);
  // By hand for element 0: v1 = 0.1, w1 = 0.49; v2 = 0.09 + 0.3 = 0.39, w2 = 0.451.
  TestParameter two("w", kStart, DType::f64, Device::cpu());
  Sgd again(lr, mu);
  two.set_grad(kGrads[0]);
  again.step(ctx, {{"w", &two.parameter}});
  two.set_grad(kGrads[1]);
  again.step(ctx, {{"w", &two.parameter}});
  EXPECT_NEAR(two.values()[0], 0.451, 1e-15);
}

std::vector<double> adam_reference(const std::vector<double>& start, int steps, double lr, double b1, double b2,
                                   double eps) {
  std::vector<double> w = start, m(start.size(), 0.0), v(start.size(), 0.0);
  for (int t = 1; t <= steps; ++t) {
    const std::vector<double>& g = kGrads[static_cast<std::size_t>(t - 1)];
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double m_hat = m[i] / (1 - std::pow(b1, t));
      double v_hat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  return w;
}

TEST(Adam, StepsMatchTheFormula) {
  const double lr = 0.01, b1 = 0.8, b2 = 0.99, eps = 1e-6;
  TestParameter w("w", kStart, DType::f64, Device::cpu());
  Adam adam(lr, b1, b2, eps);
  Context ctx;
  for (int step = 1; step <= 4; ++step) {
    w.set_grad(kGrads[static_cast<std::size_t>(step - 1)]);
    adam.step(ctx, {{"w", &w.parameter}});
    std::vector<double> expected = adam_reference(kStart, step, lr, b1, b2, eps);
    std::vector<double> got = w.values();
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-14) << "step " << step;
  }
  EXPECT_EQ(adam.steps_taken(), 4);
}

TEST(Adam, FirstStepMovesEachWeightByTheLearningRate) {
  // t = 1: m_hat = g and v_hat = g^2, so w1 = w0 - lr g / (|g| + eps).
  TestParameter w("w", kStart, DType::f64, Device::cpu());
  Adam adam(0.05);
  Context ctx;
  w.set_grad(kGrads[0]);
  adam.step(ctx, {{"w", &w.parameter}});
  std::vector<double> got = w.values();
  EXPECT_NEAR(got[0], 0.5 - 0.05, 1e-8);
  EXPECT_NEAR(got[1], -1.25 + 0.05, 1e-8);
  EXPECT_NEAR(got[2], 2.0 - 0.05, 1e-8);
  EXPECT_NEAR(got[3], 0.0 + 0.05, 1e-6);  // |g| = 0.01: eps matters at 1e-6 relative
}

TEST(Adam, StateNamesAndShapes) {
  TestParameter a("fc.weight", kStart, DType::f64, Device::cpu());
  TestParameter b("fc.bias", {1.0, 2.0}, DType::f64, Device::cpu());
  Adam adam(0.1);
  Context ctx;
  a.set_grad(kGrads[0]);
  b.set_grad({0.5, -0.5});
  adam.step(ctx, {{"fc.weight", &a.parameter}, {"fc.bias", &b.parameter}});
  std::map<std::string, Tensor> state = adam.state();
  std::vector<std::string> names;
  for (const auto& entry : state) names.push_back(entry.first);
  EXPECT_EQ(names, (std::vector<std::string>{"m/fc.bias", "m/fc.weight", "v/fc.bias", "v/fc.weight"}));
  // m = (1 - b1) g after one step.
  std::vector<double> m = state.at("m/fc.bias").to_values();
  EXPECT_NEAR(m[0], 0.1 * 0.5, 1e-15);
  EXPECT_EQ(state.at("v/fc.weight").shape(), (Shape{4}));
  // state() is a snapshot: another step does not change it.
  adam.step(ctx, {{"fc.weight", &a.parameter}, {"fc.bias", &b.parameter}});
  EXPECT_NEAR(state.at("m/fc.bias").to_values()[0], 0.05, 1e-15);
}

// Two optimisers: one runs 4 steps; the other runs 2, is saved, reloaded
// into a fresh optimiser, and runs 2 more. The results must be identical.
template <typename MakeOptimizer>
void expect_round_trip_continues_identically(MakeOptimizer make, const std::string& kind) {
  Context ctx;
  TestParameter reference("w", kStart, DType::f64, Device::cpu());
  auto straight = make();
  for (int step = 0; step < 4; ++step) {
    reference.set_grad(kGrads[step]);
    straight->step(ctx, {{"w", &reference.parameter}});
  }
  TestParameter resumed("w", kStart, DType::f64, Device::cpu());
  auto first = make();
  for (int step = 0; step < 2; ++step) {
    resumed.set_grad(kGrads[step]);
    first->step(ctx, {{"w", &resumed.parameter}});
  }
  std::map<std::string, Tensor> saved = first->state();
  std::int64_t steps = first->steps_taken();
  first.reset();
  auto second = make();
  second->load_state(saved, steps);
  EXPECT_EQ(second->steps_taken(), 2);
  for (int step = 2; step < 4; ++step) {
    resumed.set_grad(kGrads[step]);
    second->step(ctx, {{"w", &resumed.parameter}});
  }
  EXPECT_EQ(resumed.values(), reference.values()) << kind;
  EXPECT_EQ(second->steps_taken(), straight->steps_taken());
  // Without the state the continuation differs (the test can fail).
  TestParameter fresh_start("w", kStart, DType::f64, Device::cpu());
  auto forgetful = make();
  for (int step = 0; step < 2; ++step) {
    fresh_start.set_grad(kGrads[step]);
    forgetful->step(ctx, {{"w", &fresh_start.parameter}});
  }
  auto restarted = make();
  for (int step = 2; step < 4; ++step) {
    fresh_start.set_grad(kGrads[step]);
    restarted->step(ctx, {{"w", &fresh_start.parameter}});
  }
  EXPECT_NE(fresh_start.values(), reference.values()) << kind;
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  expect_round_trip_continues_identically([] { return std::make_unique<Adam>(0.01, 0.8, 0.99, 1e-6); }, "Adam");
  expect_round_trip_continues_identically([] { return std::make_unique<Sgd>(0.1, 0.9); }, "SGD");
}

TEST(Optimizer, LoadedStateIsConvertedToTheParameterDtype) {
  Context ctx;
  TestParameter w("w", kStart, DType::f32, Device::cpu());
  Sgd sgd(0.1, 0.5);
  sgd.load_state({{"momentum/w", Tensor::from_values({1, 2, 3, 4}, {4}, DType::f64)}}, 7);
  w.set_grad({0, 0, 0, 0});
  sgd.step(ctx, {{"w", &w.parameter}});
  // v = 0.5 * (1, 2, 3, 4);  w -= 0.1 v
  std::vector<double> got = w.values();
  EXPECT_NEAR(got[0], 0.5 - 0.05, 1e-7);
  EXPECT_NEAR(got[3], 0.0 - 0.2, 1e-7);
  EXPECT_EQ(sgd.state().at("momentum/w").dtype(), DType::f32);
  EXPECT_EQ(sgd.steps_taken(), 8);
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error thrown)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Optimizer, RejectsBadState) {
  Context ctx;
  Adam adam(0.1);
  EXPECT_TRUE(contains(error_of([&] {
                         adam.load_state({{"mfc.weight", Tensor({4})}}, 1);
                       }),
                       "Adam: optimiser state name 'mfc.weight' is not of the form '<state>/<parameter>'"));
  EXPECT_TRUE(contains(error_of([&] { adam.load_state({}, -1); }), "negative step count -1"));
  // State of the wrong shape is refused when the parameter meets it.
  adam.load_state({{"m/w", Tensor({3}, DType::f64)}, {"v/w", Tensor({3}, DType::f64)}}, 1);
  TestParameter w("w", kStart, DType::f64, Device::cpu());
  EXPECT_TRUE(contains(error_of([&] {
                         adam.step(ctx, {{"w", &w.parameter}});
                       }),
                       "Adam: optimiser state 'm/w' is [3] but parameter 'w' is [4]"));
  EXPECT_EQ(w.values(), kStart);  // untouched
  // ... and when loaded over live state of another shape.
  Adam live(0.1);
  w.set_grad(kGrads[0]);
  live.step(ctx, {{"w", &w.parameter}});
  EXPECT_TRUE(contains(error_of([&] {
                         live.load_state({{"m/w", Tensor({5})}}, 1);
                       }),
                       "optimiser state 'm/w' is [5] but this optimiser holds it as [4]"));
}

TEST(Optimizer, RejectsBadParametersAndHyperparameters) {
  Context ctx;
  Parameter broken;
  broken.value = Tensor({4}, DType::f64);
  broken.grad = Tensor({3}, DType::f64);
  Sgd sgd(0.1);
  EXPECT_TRUE(contains(error_of([&] {
                         sgd.step(ctx, {{"w", &broken}});
                       }),
                       "SGD: parameter 'w' is f64[4] on cpu but its gradient is f64[3] on cpu"));
  EXPECT_TRUE(contains(error_of([] { Sgd(0.1, 1.0); }), "SGD: momentum must be in [0, 1), got 1"));
  EXPECT_TRUE(contains(error_of([] { Sgd(-0.1); }), "SGD: learning_rate must be >= 0, got -0.1"));
  EXPECT_TRUE(contains(error_of([] { Adam(0.1, 0.9, 1.5); }), "Adam: beta2 must be in [0, 1), got 1.5"));
  EXPECT_TRUE(contains(error_of([] { Adam(0.1, 0.9, 0.999, 0.0); }), "Adam: epsilon must be > 0, got 0"));
  EXPECT_THROW(Adam(0.1, -0.1), ConfigError);
}

// The same steps on the CPU and on CUDA, f32 and f64.
TEST(Optimizer, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (DType dtype : {DType::f32, DType::f64}) {
    const double tolerance = dtype == DType::f32 ? 1e-6 : 1e-14;
    Context cpu_ctx, gpu_ctx(Device::cuda());
    TestParameter on_cpu("w", kStart, dtype, Device::cpu()), on_gpu("w", kStart, dtype, Device::cuda());
    TestParameter sgd_cpu("s", kStart, dtype, Device::cpu()), sgd_gpu("s", kStart, dtype, Device::cuda());
    Adam adam_cpu(0.01, 0.8, 0.99, 1e-6), adam_gpu(0.01, 0.8, 0.99, 1e-6);
    Sgd momentum_cpu(0.1, 0.9), momentum_gpu(0.1, 0.9);
    for (int step = 0; step < 4; ++step) {
      for (TestParameter* p : {&on_cpu, &on_gpu, &sgd_cpu, &sgd_gpu}) p->set_grad(kGrads[step]);
      adam_cpu.step(cpu_ctx, {{"w", &on_cpu.parameter}});
      adam_gpu.step(gpu_ctx, {{"w", &on_gpu.parameter}});
      momentum_cpu.step(cpu_ctx, {{"s", &sgd_cpu.parameter}});
      momentum_gpu.step(gpu_ctx, {{"s", &sgd_gpu.parameter}});
    }
    gpu_ctx.synchronize();
    std::vector<double> a = on_cpu.values(), b = on_gpu.values(), c = sgd_cpu.values(), d = sgd_gpu.values();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(a[i]))) << dtype_name(dtype) << " Adam " << i;
      EXPECT_NEAR(c[i], d[i], tolerance * std::max(1.0, std::abs(c[i]))) << dtype_name(dtype) << " SGD " << i;
    }
    EXPECT_EQ(adam_gpu.state().at("m/w").device(), Device::cuda());
  }
}

// begin_step() then apply() is step(): the split used by CUDA graphs changes nothing.
TEST(Optimizer, BeginStepThenApplyIsStep) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Context ctx;
    TestParameter whole("w", kStart, dtype, Device::cpu()), split("w", kStart, dtype, Device::cpu());
    Adam adam_whole(0.01), adam_split(0.01);
    for (int step = 0; step < 3; ++step) {
      whole.set_grad(kGrads[step]);
      split.set_grad(kGrads[step]);
      adam_whole.step(ctx, {{"w", &whole.parameter}});
      adam_split.begin_step(ctx, {{"w", &split.parameter}});
      EXPECT_EQ(adam_split.steps_taken(), step + 1);  // counted by begin_step
      adam_split.apply(ctx, {{"w", &split.parameter}});
    }
    EXPECT_EQ(whole.values(), split.values()) << dtype_name(dtype);
  }
}

// The fused CUDA Adam updates many parameters of different sizes (one empty)
// in one launch: each must follow its own CPU twin.
TEST(Optimizer, FusedCudaAdamMatchesCpuOverManyParameters) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (DType dtype : {DType::f32, DType::f64}) {
    const double tolerance = dtype == DType::f32 ? 1e-6 : 1e-14;
    Context cpu_ctx, gpu_ctx(Device::cuda());
    std::vector<std::unique_ptr<TestParameter>> cpu, gpu;
    std::vector<NamedParameter> cpu_named, gpu_named;
    const std::vector<int> sizes{1, 0, 300, 5, 70000, 2};
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::vector<double> start(static_cast<std::size_t>(sizes[k]));
      for (std::size_t i = 0; i < start.size(); ++i) start[i] = std::sin(0.1 * i + k);
      const std::string name = "p" + std::to_string(k);
      cpu.push_back(std::make_unique<TestParameter>(name, start, dtype, Device::cpu()));
      gpu.push_back(std::make_unique<TestParameter>(name, start, dtype, Device::cuda()));
      cpu_named.push_back({name, &cpu.back()->parameter});
      gpu_named.push_back({name, &gpu.back()->parameter});
    }
    Adam adam_cpu(0.01), adam_gpu(0.01);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        std::vector<double> g(static_cast<std::size_t>(sizes[k]));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.37 * i + 1.3 * step + k);
        cpu[k]->set_grad(g);
        gpu[k]->set_grad(g);
      }
      adam_cpu.set_learning_rate(0.01 / (step + 1));  // a schedule: read from device memory each step
      adam_gpu.set_learning_rate(0.01 / (step + 1));
      adam_cpu.step(cpu_ctx, cpu_named);
      adam_gpu.step(gpu_ctx, gpu_named);
    }
    gpu_ctx.synchronize();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::vector<double> a = cpu[k]->values(), b = gpu[k]->values();
      for (std::size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(a[i])))
            << dtype_name(dtype) << " parameter " << k << " element " << i;
    }
  }
}

}  // namespace
}  // namespace plexus

// QuantizeAroundMean: eval-mode rounding around the mean against values worked
// out by hand, training-mode noise (range, independence of the mean, the same
// draws as UniformNoise), the straight-through output and gradient, gradient
// checks in training mode (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, and
// shape and parameter errors.
#include <gtest/gtest.h>

#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

const nlohmann::json kStraightThrough = {{"synthesis", "straight_through"}};

// Binary fractions, exact in f32 and f64, so y - mu is exact and the halves
// are real halves.
const std::vector<double> kY = {2.25, -1.25, 0.75, 0.25, -0.375, 5.0};
const std::vector<double> kMean = {0.375, 0.25, 0.25, 0.75, -0.875, 5.0};
// y - mu = 1.875, -1.5, 0.5, -0.5, 0.5, 0; rounded (halves away from zero):
// 2, -2, 1, -1, 1, 0; plus mu:
const std::vector<double> kRoundedAroundMean = {2.375, -1.75, 1.25, -0.25, 0.125, 5.0};
// Plain round(y) = 2, -1, 1, 0, 0, 5 differs in four places, so a layer that
// ignored the mean would fail.

struct Run {
  std::vector<std::vector<double>> outputs;
  std::vector<double> y_grad, mean_grad;
};

// One forward and backward of a fresh layer; the input gradients start as
// garbage (7) so that a backward which does not overwrite them shows.
Run run(const nlohmann::json& params, bool training, const std::vector<double>& y, const std::vector<double>& mean,
        const std::vector<std::vector<double>>& output_grads, DType dtype = DType::f64, Device device = Device::cpu(),
        std::uint64_t seed = 5) {
  auto layer = registry.create("QuantizeAroundMean", "q", params);
  const Shape shape{1, 1, 2, static_cast<std::int64_t>(y.size() / 2)};
  const std::vector<Shape> output_shapes = layer->output_shapes({shape, shape});
  Context ctx(device, seed);
  ctx.set_training(training);
  Tensor y_t = Tensor::from_values(y, shape, dtype, device), m_t = Tensor::from_values(mean, shape, dtype, device);
  std::vector<Tensor> outputs, grads;
  for (std::size_t k = 0; k < output_shapes.size(); ++k) {
    outputs.emplace_back(shape, dtype, device);
    grads.push_back(Tensor::from_values(output_grads[k], shape, dtype, device));
  }
  const std::vector<double> garbage(y.size(), 7.0);
  Tensor dy = Tensor::from_values(garbage, shape, dtype, device),
         dm = Tensor::from_values(garbage, shape, dtype, device);
  ConstTensors out_ptrs, grad_ptrs;
  MutableTensors out_mut;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    out_ptrs.push_back(&outputs[k]);
    out_mut.push_back(&outputs[k]);
    grad_ptrs.push_back(&grads[k]);
  }
  layer->forward(ctx, {&y_t, &m_t}, out_mut);
  layer->backward(ctx, {&y_t, &m_t}, out_ptrs, grad_ptrs, {&dy, &dm});
  Run result;
  for (const Tensor& output : outputs) result.outputs.push_back(output.to_values());
  result.y_grad = dy.to_values();
  result.mean_grad = dm.to_values();
  return result;
}

const std::vector<double> kGrad = {0.5, -2.0, 4.0, 1.5, -0.25, 3.0};
const std::vector<double> kGradSt = {1.0, 0.25, -1.0, 2.0, 0.5, -3.0};
const std::vector<double> kZeros(6, 0.0);

void expect_eval_rounds_around_the_mean(Device device) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const Run noise = run({}, false, kY, kMean, {kGrad}, dtype, device);
    ASSERT_EQ(noise.outputs.size(), 1u);
    EXPECT_EQ(noise.outputs[0], kRoundedAroundMean) << dtype_name(dtype);
    const Run st = run(kStraightThrough, false, kY, kMean, {kGrad, kGradSt}, dtype, device);
    ASSERT_EQ(st.outputs.size(), 2u);
    EXPECT_EQ(st.outputs[0], kRoundedAroundMean) << dtype_name(dtype);
    EXPECT_EQ(st.outputs[1], kRoundedAroundMean) << dtype_name(dtype);
  }
}

TEST(QuantizeAroundMean, EvalRoundsAroundTheMean) { expect_eval_rounds_around_the_mean(Device::cpu()); }

TEST(QuantizeAroundMean, EvalRoundsAroundTheMeanOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_eval_rounds_around_the_mean(Device::cuda());
}

// Training: output 0 is y + u, u in [-1/2, 1/2], the same u whatever the
// mean (the noise is added to y, not to y - mu) and the same as UniformNoise
// draws under the same seed; the straight-through output is round(y - mu) + mu.
void expect_training_noise(Device device) {
  const std::vector<double> other_mean = {-3.0, 0.125, 9.5, -0.75, 0.0, 1.0};
  for (DType dtype : {DType::f64, DType::f32}) {
    const Run a = run(kStraightThrough, true, kY, kMean, {kGrad, kGradSt}, dtype, device, 11);
    const Run b = run({}, true, kY, other_mean, {kGrad}, dtype, device, 11);
    EXPECT_EQ(a.outputs[0], b.outputs[0]) << dtype_name(dtype);
    EXPECT_EQ(a.outputs[1], kRoundedAroundMean) << dtype_name(dtype);
    for (std::size_t i = 0; i < kY.size(); ++i) {
      const double u = a.outputs[0][i] - kY[i];
      EXPECT_GE(u, -0.5);
      EXPECT_LE(u, 0.5);
      EXPECT_NE(u, 0.0);
    }
    auto noise = registry.create("UniformNoise", "noise", {});
    Context ctx(device, 11);
    ctx.set_training(true);
    const Shape shape{1, 1, 2, 3};
    Tensor x = Tensor::from_values(kY, shape, dtype, device), y(shape, dtype, device);
    noise->forward(ctx, {&x}, {&y});
    EXPECT_EQ(y.to_values(), a.outputs[0]) << dtype_name(dtype);
    EXPECT_NE(run({}, true, kY, kMean, {kGrad}, dtype, device, 12).outputs[0], a.outputs[0]);
  }
}

TEST(QuantizeAroundMean, TrainingAddsUniformNoiseToY) { expect_training_noise(Device::cpu()); }

TEST(QuantizeAroundMean, TrainingAddsUniformNoiseToYOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_training_noise(Device::cuda());
}

// dL/dy = g (+ g_st), dL/dmu = 0, in both modes.
void expect_straight_through_gradients(Device device) {
  std::vector<double> summed(kGrad.size());
  for (std::size_t i = 0; i < summed.size(); ++i) summed[i] = kGrad[i] + kGradSt[i];
  for (bool training : {true, false}) {
    const Run noise = run({}, training, kY, kMean, {kGrad}, DType::f64, device);
    EXPECT_EQ(noise.y_grad, kGrad) << "training " << training;
    EXPECT_EQ(noise.mean_grad, kZeros) << "training " << training;
    const Run st = run(kStraightThrough, training, kY, kMean, {kGrad, kGradSt}, DType::f64, device);
    EXPECT_EQ(st.y_grad, summed) << "training " << training;
    EXPECT_EQ(st.mean_grad, kZeros) << "training " << training;
  }
}

TEST(QuantizeAroundMean, GradientPassesStraightThroughToYAndNotToTheMean) {
  expect_straight_through_gradients(Device::cpu());
}

TEST(QuantizeAroundMean, GradientPassesStraightThroughOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_straight_through_gradients(Device::cuda());
}

// Training mode with the noise synthesis: the check reseeds before every
// forward, so y + u is differentiated exactly (1 in y, 0 in the mean). The
// straight-through output is not checked this way: its gradient is by design
// not the derivative of round (see expect_straight_through_gradients).
TEST(QuantizeAroundMean, GradientsCpu) {
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "QuantizeAroundMean", {}, {shape, shape})));
}

TEST(QuantizeAroundMean, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Shape shape : {Shape{7}, Shape{2, 3, 4, 5}})
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "QuantizeAroundMean", {}, {shape, shape}, Device::cuda())));
}

TEST(QuantizeAroundMean, ParityCpuCudaInEval) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ParityOptions options;
  options.training = false;  // the devices draw different noise; rounding must agree
  options.input_low = -20.0;
  options.input_high = 20.0;
  const Shape shape{4, 8, 16, 16};
  for (const nlohmann::json& params : {nlohmann::json::object(), kStraightThrough})
    EXPECT_TRUE(testing::outputs_match(check_parity(registry, "QuantizeAroundMean", params, {shape, shape}, options)))
        << params.dump();
}

void expect_shape_error(const std::vector<Shape>& shapes, const std::string& expected) {
  auto layer = registry.create("QuantizeAroundMean", "q", {});
  try {
    layer->output_shapes(shapes);
    FAIL() << "expected a ShapeError containing: " << expected;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(QuantizeAroundMean, OutputsFollowTheSynthesisParam) {
  const Shape shape{1, 4, 3, 3};
  EXPECT_EQ(registry.create("QuantizeAroundMean", "q", {})->output_shapes({shape, shape}), std::vector<Shape>{shape});
  EXPECT_EQ(registry.create("QuantizeAroundMean", "q", {{"synthesis", "noise"}})->output_shapes({shape, shape}),
            std::vector<Shape>{shape});
  EXPECT_EQ(registry.create("QuantizeAroundMean", "q", kStraightThrough)->output_shapes({shape, shape}),
            (std::vector<Shape>{shape, shape}));
}

TEST(QuantizeAroundMean, RejectsBadShapesAndParams) {
  expect_shape_error({{1, 2, 3, 3}}, "node 'q' (QuantizeAroundMean): takes 2 inputs (y, means), got 1");
  expect_shape_error({{1, 2, 3, 3}, {1, 2, 3, 3}, {1, 2, 3, 3}}, "takes 2 inputs (y, means), got 3");
  expect_shape_error({{1, 2, 3, 3}, {1, 2, 3, 4}},
                     "input 1 (means) [1, 2, 3, 4] must have the shape of y [1, 2, 3, 3]");
  try {
    registry.create("QuantizeAroundMean", "q", {{"synthesis", "rounded"}});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must be \"noise\" or \"straight_through\", got \"rounded\""),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace plexus

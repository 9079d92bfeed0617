// FullyConnected: forward against a naive loop and a hand-computed case,
// gradient checks (CPU; CUDA in f64 and CPU/CUDA f32 parity on a GPU), the
// backward contract, initialisation, and bad params / shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

// A layer whose parameters are initialised (f64, CPU) for input `shape`.
std::unique_ptr<Layer> make_layer(const nlohmann::json& params, const Shape& shape, std::uint64_t seed = 5) {
  auto layer = registry.create("FullyConnected", "fc", params);
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(seed);
  layer->initialize_parameters(DType::f64, Device::cpu(), rng);
  return layer;
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

TEST(FullyConnected, ForwardHandComputed) {
  auto layer = make_layer({{"out_features", 2}}, {2, 2});
  layer->parameter("weight").value = Tensor::from_values({1, 2, 3, 4}, {2, 2}, DType::f64);
  layer->parameter("bias").value = Tensor::from_values({0.5, -1}, {2}, DType::f64);
  Context ctx;
  Tensor x = Tensor::from_values({1, 1, 2, -1}, {2, 2}, DType::f64);
  Tensor y({2, 2}, DType::f64);
  layer->forward(ctx, {&x}, {&y});
  // [1 1] -> [1+2+0.5, 3+4-1];  [2 -1] -> [2-2+0.5, 6-4-1]
  EXPECT_EQ(y.to_values(), (std::vector<double>{3.5, 6.0, 0.5, 1.0}));
}

TEST(FullyConnected, ForwardMatchesNaiveLoopOnFlattenedInput) {
  const Shape shape{3, 2, 2, 2};  // F = 8
  const int batch = 3, features = 8, out = 5;
  auto layer = make_layer({{"out_features", out}}, shape);
  std::vector<double> w = layer->parameter("weight").value.to_values();
  std::vector<double> b = layer->parameter("bias").value.to_values();
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> dist(-2, 2);
  std::vector<double> x(batch * features);
  for (auto& v : x) v = dist(rng);
  Context ctx;
  Tensor input = Tensor::from_values(x, shape, DType::f64);
  Tensor output({batch, out}, DType::f64);
  layer->forward(ctx, {&input}, {&output});
  std::vector<double> y = output.to_values();
  for (int n = 0; n < batch; ++n)
    for (int o = 0; o < out; ++o) {
      double expected = b[o];
      for (int f = 0; f < features; ++f) expected += w[o * features + f] * x[n * features + f];
      EXPECT_NEAR(y[n * out + o], expected, 1e-12) << "n=" << n << " o=" << o;
    }
}

TEST(FullyConnected, ParametersAndFanInInitialisation) {
  auto layer = make_layer({{"out_features", 7}}, {4, 3, 3});  // F = 9, bound 1/3
  ASSERT_EQ(layer->parameters().size(), 2u);
  EXPECT_EQ(layer->parameter("weight").shape, (Shape{7, 9}));
  EXPECT_EQ(layer->parameter("bias").shape, (Shape{7}));
  for (const char* name : {"weight", "bias"}) {
    std::vector<double> values = layer->parameter(name).value.to_values();
    double largest = 0;
    for (double v : values) {
      EXPECT_LE(std::abs(v), 1.0 / 3.0) << name;
      largest = std::max(largest, std::abs(v));
    }
    EXPECT_GT(largest, 0.05) << name << " looks uninitialised";
  }
  auto without_bias = make_layer({{"out_features", 2}, {"bias", false}}, {1, 3});
  ASSERT_EQ(without_bias->parameters().size(), 1u);
  EXPECT_EQ(without_bias->parameters()[0]->name, "weight");
}

TEST(FullyConnected, BackwardOverwritesInputGradAndAccumulatesParameterGrads) {
  auto layer = make_layer({{"out_features", 2}}, {2, 3});
  Context ctx;
  Tensor x = Tensor::from_values({1, 2, 3, -1, 0.5, 2}, {2, 3}, DType::f64);
  Tensor y({2, 2}, DType::f64);
  Tensor dy = Tensor::from_values({1, -2, 0.5, 3}, {2, 2}, DType::f64);
  Tensor dx = Tensor::from_values(std::vector<double>(6, 100.0), {2, 3}, DType::f64);  // stale values
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  std::vector<double> dx_once = dx.to_values();
  std::vector<double> dw_once = layer->parameter("weight").grad.to_values();
  std::vector<double> db_once = layer->parameter("bias").grad.to_values();
  // db = column sums of dy; dW[o, f] = sum_n dy[n, o] x[n, f]; dx = dy W.
  EXPECT_EQ(db_once, (std::vector<double>{1.5, 1.0}));
  EXPECT_NEAR(dw_once[0], 1 * 1 + 0.5 * -1, 1e-15);
  EXPECT_NEAR(dw_once[5], -2 * 3 + 3 * 2, 1e-15);
  std::vector<double> w = layer->parameter("weight").value.to_values();
  EXPECT_NEAR(dx_once[0], 1 * w[0] + -2 * w[3], 1e-15);
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  EXPECT_EQ(dx.to_values(), dx_once);  // overwritten, not accumulated
  std::vector<double> dw_twice = layer->parameter("weight").grad.to_values();
  for (std::size_t i = 0; i < dw_twice.size(); ++i) EXPECT_DOUBLE_EQ(dw_twice[i], 2 * dw_once[i]);
  EXPECT_EQ(layer->parameter("bias").grad.to_values(), (std::vector<double>{3.0, 2.0}));
  // A null input gradient is allowed.
  layer->backward(ctx, {&x}, {&y}, {&dy}, {nullptr});
}

struct Case {
  nlohmann::json params;
  Shape shape;
};

std::vector<Case> gradient_cases() {
  return {
      {{{"out_features", 1}}, {1, 1}},                   // the smallest layer
      {{{"out_features", 5}}, {3, 4}},                   // batch > 1
      {{{"out_features", 4}}, {2, 3, 2, 2}},             // NCHW input flattened
      {{{"out_features", 3}, {"bias", false}}, {4, 2}},  // no bias
  };
}

TEST(FullyConnected, GradientsCpu) {
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "FullyConnected", c.params, {c.shape})));
}

TEST(FullyConnected, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(
        testing::gradients_match(check_gradients(registry, "FullyConnected", c.params, {c.shape}, Device::cuda())));
}

TEST(FullyConnected, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "FullyConnected", {{"out_features", 37}}, {{19, 3, 5, 7}})));
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "FullyConnected", {{"out_features", 70}, {"bias", false}}, {{300, 33}})));
  ParityOptions f64;
  f64.dtype = DType::f64;
  f64.tolerance = 1e-12;
  EXPECT_TRUE(
      testing::outputs_match(check_parity(registry, "FullyConnected", {{"out_features", 45}}, {{66, 40}}, f64)));
}

TEST(FullyConnected, RejectsBadParams) {
  EXPECT_TRUE(contains(error_of([] {
                         registry.create("FullyConnected", "fc", {{"out_features", 0}});
                       }),
                       "node 'fc' (FullyConnected): parameter 'out_features' must be in [1, 65536], got 0"));
  EXPECT_TRUE(contains(error_of([] { registry.create("FullyConnected", "fc", nlohmann::json::object()); }),
                       "parameter 'out_features' is required"));
  EXPECT_TRUE(contains(error_of([] {
                         registry.create("FullyConnected", "fc", {{"out_features", 2}, {"bias", 1}});
                       }),
                       "parameter 'bias' must be true or false, got 1"));
  EXPECT_TRUE(contains(error_of([] {
                         registry.create("FullyConnected", "fc", {{"out_features", 2}, {"biases", true}});
                       }),
                       "unknown parameter 'biases'"));
  EXPECT_THROW(registry.create("FullyConnected", "fc", {{"out_features", -3}}), ConfigError);
}

TEST(FullyConnected, RejectsBadShapes) {
  auto layer = registry.create("FullyConnected", "fc", {{"out_features", 3}});
  EXPECT_TRUE(contains(error_of([&] { layer->output_shapes({{5}}); }),
                       "node 'fc' (FullyConnected): input must be [N, ...] with at least 2 dimensions "
                       "(batch and features), got [5]"));
  EXPECT_TRUE(contains(error_of([&] { layer->output_shapes({{2, 3}, {2, 3}}); }), "takes 1 input, got 2"));
  EXPECT_TRUE(contains(error_of([&] { layer->output_shapes({{2, 0, 4}}); }), "input [2, 0, 4] has no features"));
  EXPECT_THROW(layer->output_shapes({{5}}), ShapeError);
  EXPECT_EQ(layer->output_shapes({{6, 2, 2}}), (std::vector<Shape>{{6, 3}}));
  layer->create_parameters({{6, 2, 2}});
  // The weight is [3, 4] now; another batch size is fine, another F is not.
  EXPECT_EQ(layer->output_shapes({{9, 4}}), (std::vector<Shape>{{9, 3}}));
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{6, 5}});
                       }),
                       "input [6, 5] has 5 features per batch item, but the weight was created as [3, 4] for 4"));
}

}  // namespace
}  // namespace plexus

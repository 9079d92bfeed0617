// SoftmaxProjection: forward against a naive loop and a hand-computed case
// with large logits, gradient checks (CPU; CUDA in f64 and CPU/CUDA f32
// parity on a GPU), the CUDA loss and gradients against the f64 CPU kernels
// with vocabularies the CUDA logits are padded for (strict f32, TF32, BF16),
// label validation, and bad params / shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"
#include "tensor_core_reference.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

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

// Input 1 holds labels: integers drawn uniformly from [0, vocab).
std::function<void(int, std::vector<double>&, std::mt19937_64&)> label_filler(std::int64_t vocab) {
  return [vocab](int input, std::vector<double>& values, std::mt19937_64& rng) {
    if (input != 1) return;
    std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
    for (auto& v : values) v = static_cast<double>(pick(rng));
  };
}

std::unique_ptr<Layer> make_layer(const nlohmann::json& params, const Shape& features, DType dtype = DType::f64,
                                  Device device = Device::cpu()) {
  auto layer = registry.create("SoftmaxProjection", "sp", params);
  std::vector<Shape> shapes{features, {features[0]}};
  layer->output_shapes(shapes);
  layer->create_parameters(shapes);
  std::mt19937_64 rng(3);
  layer->initialize_parameters(dtype, device, rng);
  return layer;
}

TEST(SoftmaxProjection, ForwardMatchesNaiveLoop) {
  const Shape shape{4, 3, 2};  // F = 6
  const int batch = 4, features = 6, vocab = 5;
  auto layer = make_layer({{"vocab_size", vocab}}, shape);
  std::vector<double> w = layer->parameter("weight").value.to_values();
  std::vector<double> b = layer->parameter("bias").value.to_values();
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> dist(-3, 3);
  std::vector<double> x(batch * features);
  for (auto& v : x) v = dist(rng);
  std::vector<double> labels{4, 0, 2, 2};
  Context ctx;
  Tensor input = Tensor::from_values(x, shape, DType::f64);
  Tensor label_tensor = Tensor::from_values(labels, {batch}, DType::f64);
  Tensor loss(Shape{}, DType::f64);
  layer->forward(ctx, {&input, &label_tensor}, {&loss});
  // Naive: -log(exp(z_y) / sum_v exp(z_v)), no max subtraction (small logits).
  double expected = 0;
  for (int n = 0; n < batch; ++n) {
    std::vector<double> z(vocab);
    double normaliser = 0;
    for (int v = 0; v < vocab; ++v) {
      z[v] = b[v];
      for (int f = 0; f < features; ++f) z[v] += w[v * features + f] * x[n * features + f];
      normaliser += std::exp(z[v]);
    }
    expected += -std::log(std::exp(z[static_cast<int>(labels[n])]) / normaliser);
  }
  expected /= batch;
  ASSERT_EQ(loss.shape(), Shape{});
  EXPECT_NEAR(loss.to_values()[0], expected, 1e-12);
}

// bias = [1000, 999, -1000], W = 0, labels 0, 1, 2. With c = log(1 + e^-1 + e^-2000):
// -log p = c, 1 + c, 2000 + c; mean = 667 + c. exp(1000) alone overflows even f64.
void check_large_logits(DType dtype, Device device, double tolerance) {
  auto layer = make_layer({{"vocab_size", 3}}, {3, 2}, dtype, device);
  layer->parameter("weight").value = Tensor(Shape{3, 2}, dtype, device);
  layer->parameter("bias").value = Tensor::from_values({1000, 999, -1000}, {3}, dtype, device);
  Context ctx(device);
  Tensor x = Tensor::from_values({0.3, -0.7, 1.1, 0.2, -0.5, 0.9}, {3, 2}, dtype, device);
  Tensor labels = Tensor::from_values({0, 1, 2}, {3}, dtype, device);
  Tensor loss(Shape{}, dtype, device);
  layer->forward(ctx, {&x, &labels}, {&loss});
  const double c = std::log1p(std::exp(-1.0));
  double value = loss.to_values()[0];
  ASSERT_TRUE(std::isfinite(value)) << value;
  EXPECT_NEAR(value, 667.0 + c, tolerance * 667.0);
  Tensor dloss = Tensor::from_values({1.0}, Shape{}, dtype, device);
  Tensor dx(Shape{3, 2}, dtype, device);
  layer->backward(ctx, {&x, &labels}, {&loss}, {&dloss}, {&dx, nullptr});
  // db[v] = (1/N) sum_n (p[n, v] - [v == y_n]); p is the same for every row:
  // p = (1, e^-1, ~0) / (1 + e^-1).
  const double p0 = 1 / (1 + std::exp(-1.0)), p1 = std::exp(-1.0) / (1 + std::exp(-1.0));
  std::vector<double> db = layer->parameter("bias").grad.to_values();
  EXPECT_NEAR(db[0], p0 - 1.0 / 3, 10 * tolerance);
  EXPECT_NEAR(db[1], p1 - 1.0 / 3, 10 * tolerance);
  EXPECT_NEAR(db[2], -1.0 / 3, 10 * tolerance);
  for (double g : dx.to_values()) EXPECT_TRUE(std::isfinite(g));
  for (double g : layer->parameter("weight").grad.to_values()) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxProjection, LargeLogitsGiveFiniteLossCpu) {
  check_large_logits(DType::f64, Device::cpu(), 1e-14);
  check_large_logits(DType::f32, Device::cpu(), 1e-6);
}

TEST(SoftmaxProjection, LargeLogitsGiveFiniteLossCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  check_large_logits(DType::f64, Device::cuda(), 1e-14);
  check_large_logits(DType::f32, Device::cuda(), 1e-6);
}

struct Case {
  nlohmann::json params;
  Shape features;
};

std::vector<Case> gradient_cases() {
  return {
      {{{"vocab_size", 3}}, {1, 4}},                   // batch of one
      {{{"vocab_size", 1}}, {2, 3}},                   // one class: loss 0, zero gradients
      {{{"vocab_size", 4}}, {5, 3}},                   // batch > 1
      {{{"vocab_size", 6}}, {3, 2, 2, 1}},             // features flattened from NCHW
      {{{"vocab_size", 4}, {"bias", false}}, {4, 3}},  // no bias
  };
}

GradCheckOptions options_for(const Case& c) {
  GradCheckOptions options;
  options.input_filler = label_filler(c.params["vocab_size"].get<std::int64_t>());
  options.input_low = -2.0;
  options.input_high = 2.0;
  return options;
}

TEST(SoftmaxProjection, GradientsCpu) {
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(
        registry, "SoftmaxProjection", c.params, {c.features, {c.features[0]}}, Device::cpu(), options_for(c))));
}

TEST(SoftmaxProjection, GradientsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (const Case& c : gradient_cases())
    EXPECT_TRUE(testing::gradients_match(check_gradients(
        registry, "SoftmaxProjection", c.params, {c.features, {c.features[0]}}, Device::cuda(), options_for(c))));
}

TEST(SoftmaxProjection, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // A vocabulary wider than one block of threads and one not a multiple of 32.
  for (auto [vocab, batch, features] : {std::tuple<int, int, int>{1000, 33, 20}, {37, 70, 50}}) {
    ParityOptions options;
    options.input_filler = label_filler(vocab);
    EXPECT_TRUE(testing::outputs_match(
        check_parity(registry, "SoftmaxProjection", {{"vocab_size", vocab}}, {{batch, features}, {batch}}, options)));
  }
  ParityOptions f64;
  f64.dtype = DType::f64;
  f64.tolerance = 1e-12;
  f64.input_filler = label_filler(300);
  EXPECT_TRUE(testing::outputs_match(
      check_parity(registry, "SoftmaxProjection", {{"vocab_size", 300}, {"bias", false}}, {{9, 2, 4}, {9}}, f64)));
}

// Norm-relative errors of the CUDA f32 loss and gradients at one precision
// against the f64 CPU kernels (testing::relative_error; NaN fails any bound).
struct CudaErrors {
  double loss = 0.0, input_grad = 0.0, weight_grad = 0.0, bias_grad = 0.0;
};

std::ostream& operator<<(std::ostream& out, const CudaErrors& e) {
  return out << "loss " << e.loss << ", input gradient " << e.input_grad << ", weight gradient " << e.weight_grad
             << ", bias gradient " << e.bias_grad;
}

// One forward and backward of a [batch, features] -> vocab projection, f64 on
// the CPU against f32 on CUDA at `precision`, with the same parameters (the
// f64 layer's, rounded to f32),
// inputs, labels and output gradient g = 0.75. On CUDA the input gradient is
// poisoned with NaN and the parameter gradients start from random values, so
// an unwritten element or an overwritten accumulation shows.
CudaErrors cuda_errors(int vocab, int batch, int features, std::uint64_t seed, Precision precision) {
  const Device gpu = Device::cuda();
  const nlohmann::json params{{"vocab_size", vocab}};
  const Shape shape{batch, features};
  auto reference = make_layer(params, shape, DType::f64, Device::cpu());
  auto tested = make_layer(params, shape, DType::f32, gpu);
  std::mt19937_64 rng(seed);
  // The layer's own initialisation, U(-1/sqrt(F), 1/sqrt(F)), keeps the logits O(1).
  for (Parameter* p : reference->parameters())
    tested->parameter(p->name).value.copy_from(Tensor::from_values(p->value.to_values(), p->shape, DType::f32, gpu));
  const std::vector<double> x = testing::uniform_values(static_cast<std::size_t>(batch) * features, rng);
  std::vector<double> labels(static_cast<std::size_t>(batch));
  label_filler(vocab)(1, labels, rng);
  const double g = 0.75;

  Context cpu;
  Tensor x64 = Tensor::from_values(x, shape, DType::f64), y64 = Tensor::from_values(labels, {batch}, DType::f64);
  Tensor loss64(Shape{}, DType::f64), dloss64 = Tensor::from_values({g}, Shape{}, DType::f64), dx64(shape, DType::f64);
  for (Parameter* p : reference->parameters()) p->grad.fill_zero();
  reference->forward(cpu, {&x64, &y64}, {&loss64});
  reference->backward(cpu, {&x64, &y64}, {&loss64}, {&dloss64}, {&dx64, nullptr});

  Context ctx(gpu);
  ctx.set_precision(precision);
  Tensor x32 = Tensor::from_values(x, shape, DType::f32, gpu),
         y32 = Tensor::from_values(labels, {batch}, DType::f32, gpu);
  Tensor loss32(Shape{}, DType::f32, gpu), dloss32 = Tensor::from_values({g}, Shape{}, DType::f32, gpu);
  Tensor dx32 = Tensor::from_values(std::vector<double>(x.size(), std::nan("")), shape, DType::f32, gpu);
  std::map<std::string, std::vector<double>> initial;
  for (Parameter* p : tested->parameters()) {
    initial[p->name] = testing::uniform_values(static_cast<std::size_t>(shape_numel(p->shape)), rng);
    p->grad.copy_from(Tensor::from_values(initial[p->name], p->shape, DType::f32, gpu));
  }
  tested->forward(ctx, {&x32, &y32}, {&loss32});
  tested->backward(ctx, {&x32, &y32}, {&loss32}, {&dloss32}, {&dx32, nullptr});
  ctx.synchronize();

  auto added = [&](const std::string& name) {
    std::vector<double> values = tested->parameter(name).grad.to_values();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] -= initial[name][i];
    return testing::relative_error(values, reference->parameter(name).grad.to_values());
  };
  CudaErrors errors;
  errors.loss = testing::relative_error(loss32.to_values(), loss64.to_values());
  errors.input_grad = testing::relative_error(dx32.to_values(), dx64.to_values());
  errors.weight_grad = added("weight");
  errors.bias_grad = added("bias");
  return errors;
}

void expect_errors_below(const CudaErrors& errors, double tolerance, const std::string& what) {
  EXPECT_LT(errors.loss, tolerance) << "loss, " << what;
  EXPECT_LT(errors.input_grad, tolerance) << "input gradient, " << what;
  EXPECT_LT(errors.weight_grad, tolerance) << "weight gradient, " << what;
  EXPECT_LT(errors.bias_grad, tolerance) << "bias gradient, " << what;
}

// The CUDA logits are stored V_pad = 8 * ceil(V / 8) wide. At strict f32 the
// loss and every gradient must match the f64 CPU kernels to f32 rounding for
// vocabularies that need padding (13 -> 16, 37 -> 40, 1001 -> 1008, wider than
// a block of the row kernels) and one that does not (8): a padding column
// taking part in the maximum, the normaliser or the gradients would be off by
// far more than 1e-5 (with zeroed padding, each such column adds exp(-m_n) to
// a normaliser of V terms of similar size).
TEST(SoftmaxProjection, PaddedVocabularyMatchesF64ReferenceCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::uint64_t seed = 40;
  for (int vocab : {13, 37, 8, 1001}) {
    const CudaErrors errors = cuda_errors(vocab, 24, 20, seed++, Precision::f32);
    expect_errors_below(errors, 1e-5, "strict f32, vocab " + std::to_string(vocab));
  }
}

// TF32 and BF16 tensor-core products (cuBLAS) against the f64 reference, with
// tolerances that fit each precision (tensor_core_reference.h: 2e-3 and 1e-2),
// and bf16's weight and input gradients visibly less accurate than tf32's (8
// significant bits rounded against 11 truncated: ~4x), so bf16 silently
// running as TF32 fails.
TEST(SoftmaxProjection, TensorCorePrecisionsMatchF64ReferenceCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::uint64_t seed = 60;
  for (int vocab : {37, 1001}) {
    const std::string what = "vocab " + std::to_string(vocab);
    const CudaErrors tf32 = cuda_errors(vocab, 96, 256, seed, Precision::tf32);
    const CudaErrors bf16 = cuda_errors(vocab, 96, 256, seed++, Precision::bf16);
    std::cout << what << "\n  tf32: " << tf32 << "\n  bf16: " << bf16 << "\n";
    expect_errors_below(tf32, testing::kTf32Tolerance, "tf32, " + what);
    expect_errors_below(bf16, testing::kBf16Tolerance, "bf16, " + what);
    EXPECT_GT(bf16.weight_grad, 1.5 * tf32.weight_grad) << "weight gradient at bf16 against tf32, " << what;
    EXPECT_GT(bf16.input_grad, 1.5 * tf32.input_grad) << "input gradient at bf16 against tf32, " << what;
  }
}

TEST(SoftmaxProjection, LabelsAreNotDifferentiable) {
  auto layer = make_layer({{"vocab_size", 3}}, {2, 2});
  EXPECT_TRUE(layer->traits(Device::cpu()).input_is_differentiable(0));
  EXPECT_FALSE(layer->traits(Device::cpu()).input_is_differentiable(1));
}

void expect_label_errors(Device device) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct BadLabel {
    double value;
    const char* shown;
  };
  for (BadLabel bad : {BadLabel{2.5, "2.5"}, BadLabel{-1, "-1"}, BadLabel{4, "4"}, BadLabel{nan, "nan"}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      auto layer = make_layer({{"vocab_size", 4}}, {3, 2}, dtype, device);
      Context ctx(device);
      Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6}, {3, 2}, dtype, device);
      Tensor labels = Tensor::from_values({3, bad.value, 0}, {3}, dtype, device);
      Tensor loss(Shape{}, dtype, device);
      std::string message = error_of([&] { layer->forward(ctx, {&x, &labels}, {&loss}); });
      EXPECT_TRUE(contains(message, std::string("node 'sp' (SoftmaxProjection): label at batch index 1 is ") +
                                        bad.shown + "; labels must be integers in [0, 4)"))
          << message;
    }
  }
}

TEST(SoftmaxProjection, RejectsBadLabelsCpu) { expect_label_errors(Device::cpu()); }

TEST(SoftmaxProjection, RejectsBadLabelsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_label_errors(Device::cuda());
}

TEST(SoftmaxProjection, NamesTheFirstBadLabel) {
  auto layer = make_layer({{"vocab_size", 2}}, {4, 1});
  Context ctx;
  Tensor x = Tensor::from_values({1, 2, 3, 4}, {4, 1}, DType::f64);
  Tensor labels = Tensor::from_values({1, 0, 7, 9}, {4}, DType::f64);
  Tensor loss(Shape{}, DType::f64);
  EXPECT_TRUE(contains(error_of([&] { layer->forward(ctx, {&x, &labels}, {&loss}); }), "batch index 2 is 7;"));
}

TEST(SoftmaxProjection, RejectsBadParams) {
  EXPECT_TRUE(contains(error_of([] {
                         registry.create("SoftmaxProjection", "sp", {{"vocab_size", 0}});
                       }),
                       "node 'sp' (SoftmaxProjection): parameter 'vocab_size' must be in [1, 65536], got 0"));
  EXPECT_TRUE(contains(error_of([] { registry.create("SoftmaxProjection", "sp", nlohmann::json::object()); }),
                       "parameter 'vocab_size' is required"));
  EXPECT_TRUE(contains(error_of([] {
                         registry.create("SoftmaxProjection", "sp", {{"vocab_size", 2.5}});
                       }),
                       "parameter 'vocab_size' must be an integer, got 2.5"));
  EXPECT_THROW(registry.create("SoftmaxProjection", "sp", {{"vocab_size", 3}, {"classes", 3}}), ConfigError);
}

TEST(SoftmaxProjection, RejectsBadShapes) {
  auto layer = registry.create("SoftmaxProjection", "sp", {{"vocab_size", 3}});
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{2, 4}});
                       }),
                       "node 'sp' (SoftmaxProjection): takes 2 inputs (features [N, F] and labels [N]), got 1"));
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{2, 4}, {3}});
                       }),
                       "labels must be [N] = [2] to match features [2, 4], got [3]"));
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{2, 4}, {2, 1}});
                       }),
                       "labels must be [N] = [2] to match features [2, 4], got [2, 1]"));
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{4}, {4}});
                       }),
                       "features must be [N, ...] with at least 2 dimensions (batch and features), got [4]"));
  EXPECT_TRUE(contains(error_of([&] { layer->output_shapes({{0, 4}, {0}}); }), "empty batch"));
  EXPECT_THROW(layer->output_shapes({{2, 4}, {3}}), ShapeError);
  EXPECT_EQ(layer->output_shapes({{2, 2, 2}, {2}}), (std::vector<Shape>{Shape{}}));
  layer->create_parameters({{2, 2, 2}, {2}});
  EXPECT_EQ(layer->parameter("weight").shape, (Shape{3, 4}));
  EXPECT_EQ(layer->parameter("bias").shape, (Shape{3}));
  EXPECT_TRUE(contains(error_of([&] {
                         layer->output_shapes({{2, 5}, {2}});
                       }),
                       "features [2, 5] have 5 features per batch item, but the weight was created as [3, 4] for 4"));
}

}  // namespace
}  // namespace plexus

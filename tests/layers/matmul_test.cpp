// MatMul: products by hand (plain, each transpose, a scale, a batch), the
// backward by hand for each transpose, gradient checks of both inputs for
// every transpose pair (CPU; CUDA in f64 on a GPU), CPU/CUDA parity, shape
// and parameter errors that name the culprit; single-head attention written
// in JSON from MatMul, Softmax and MatMul against plain loops.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

nlohmann::json transposes(bool transpose_a, bool transpose_b, double scale = 1.0) {
  return {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}, {"scale", scale}};
}

// A [..., M, K] and B [..., K, P] as stored under the given transposes.
std::vector<Shape> operand_shapes(Shape batch, std::int64_t m, std::int64_t k, std::int64_t p, bool transpose_a,
                                  bool transpose_b) {
  Shape a = batch, b = batch;
  a.insert(a.end(), {transpose_a ? k : m, transpose_a ? m : k});
  b.insert(b.end(), {transpose_b ? p : k, transpose_b ? k : p});
  return {a, b};
}

Tensor f64_tensor(const std::vector<double>& values, Shape shape) {
  return Tensor::from_values(values, std::move(shape), DType::f64);
}

// A [[1, 2, 3], [4, 5, 6]] times B [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]].
TEST(MatMul, ForwardByHandUnderEveryTranspose) {
  const Tensor a = f64_tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor a_t = f64_tensor({1, 4, 2, 5, 3, 6}, {3, 2});  // A stored transposed
  const Tensor b = f64_tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  const Tensor b_t = f64_tensor({7, 9, 11, 8, 10, 12}, {2, 3});
  Context ctx;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      auto layer = registry.create("MatMul", "qk", transposes(transpose_a, transpose_b));
      Tensor c({2, 2}, DType::f64);
      layer->forward(ctx, {transpose_a ? &a_t : &a, transpose_b ? &b_t : &b}, {&c});
      EXPECT_EQ(c.to_values(), (std::vector<double>{58, 64, 139, 154}))
          << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
    }
}

TEST(MatMul, ForwardAppliesTheScale) {
  auto layer = registry.create("MatMul", "qk", transposes(false, false, 0.5));
  Context ctx;
  Tensor a = f64_tensor({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64_tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c({2, 2}, DType::f64);
  layer->forward(ctx, {&a, &b}, {&c});
  EXPECT_EQ(c.to_values(), (std::vector<double>{29, 32, 69.5, 77}));
}

TEST(MatMul, ForwardMultipliesEachBatchItemByItsOwnMatrices) {
  auto layer = registry.create("MatMul", "qk", {});
  Context ctx;
  // [2, 1, 2, 2]: item 0 is I [[1, 2], [3, 4]]; item 1 swaps the rows of [[5, 6], [7, 8]].
  Tensor a = Tensor::from_values({1, 0, 0, 1, 0, 1, 1, 0}, {2, 1, 2, 2});
  Tensor b = Tensor::from_values({1, 2, 3, 4, 5, 6, 7, 8}, {2, 1, 2, 2});
  Tensor c({2, 1, 2, 2});
  EXPECT_EQ(layer->output_shapes({a.shape(), b.shape()}), (std::vector<Shape>{{2, 1, 2, 2}}));
  layer->forward(ctx, {&a, &b}, {&c});
  EXPECT_EQ(c.to_values(), (std::vector<double>{1, 2, 3, 4, 7, 8, 5, 6}));
}

TEST(MatMul, OutputShapeIsTheBatchThenRowsOfOpAThenColumnsOfOpB) {
  // Attention: scores Q K^T [N, heads, T, T], then the weighted values [N, heads, T, d].
  auto scores = registry.create("MatMul", "qk", transposes(false, true));
  EXPECT_EQ(scores->output_shapes({{2, 4, 64, 32}, {2, 4, 64, 32}}), (std::vector<Shape>{{2, 4, 64, 64}}));
  auto values = registry.create("MatMul", "av", {});
  EXPECT_EQ(values->output_shapes({{2, 4, 64, 64}, {2, 4, 64, 32}}), (std::vector<Shape>{{2, 4, 64, 32}}));
  auto both = registry.create("MatMul", "tt", transposes(true, true));
  EXPECT_EQ(both->output_shapes({{3, 5}, {7, 3}}), (std::vector<Shape>{{5, 7}}));
}

// A [[1, 2], [3, 4]], B [[5, 6], [7, 8]], dC [[1, 0], [0, 0]]:
// dA = dC B^T = [[5, 7], [0, 0]],  dB = A^T dC = [[1, 0], [2, 0]];
// stored transposed, the gradients are their transposes [[5, 0], [7, 0]] and [[1, 2], [0, 0]].
TEST(MatMul, BackwardByHandUnderEveryTranspose) {
  const Tensor a = f64_tensor({1, 2, 3, 4}, {2, 2}), a_t = f64_tensor({1, 3, 2, 4}, {2, 2});
  const Tensor b = f64_tensor({5, 6, 7, 8}, {2, 2}), b_t = f64_tensor({5, 7, 6, 8}, {2, 2});
  const Tensor dc = f64_tensor({1, 0, 0, 0}, {2, 2});
  Context ctx;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true})
      for (double scale : {1.0, 0.5}) {
        auto layer = registry.create("MatMul", "qk", transposes(transpose_a, transpose_b, scale));
        Tensor c({2, 2}, DType::f64), da({2, 2}, DType::f64), db({2, 2}, DType::f64);
        const Tensor* input_a = transpose_a ? &a_t : &a;
        const Tensor* input_b = transpose_b ? &b_t : &b;
        layer->forward(ctx, {input_a, input_b}, {&c});
        layer->backward(ctx, {input_a, input_b}, {&c}, {&dc}, {&da, &db});
        std::vector<double> expected_da =
            transpose_a ? std::vector<double>{5, 0, 7, 0} : std::vector<double>{5, 7, 0, 0};
        std::vector<double> expected_db =
            transpose_b ? std::vector<double>{1, 2, 0, 0} : std::vector<double>{1, 0, 2, 0};
        for (double& v : expected_da) v *= scale;
        for (double& v : expected_db) v *= scale;
        EXPECT_EQ(da.to_values(), expected_da) << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
        EXPECT_EQ(db.to_values(), expected_db) << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
      }
}

TEST(MatMul, BackwardSkipsAnUnwantedGradient) {
  auto layer = registry.create("MatMul", "qk", {});
  Context ctx;
  Tensor a = f64_tensor({1, 2, 3, 4}, {2, 2}), b = f64_tensor({5, 6, 7, 8}, {2, 2});
  Tensor c({2, 2}, DType::f64), dc = f64_tensor({1, 0, 0, 0}, {2, 2}), db({2, 2}, DType::f64);
  layer->forward(ctx, {&a, &b}, {&c});
  layer->backward(ctx, {&a, &b}, {&c}, {&dc}, {nullptr, &db});
  EXPECT_EQ(db.to_values(), (std::vector<double>{1, 0, 2, 0}));
}

TEST(MatMul, GradientsCpuUnderEveryTranspose) {
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      EXPECT_TRUE(
          testing::gradients_match(check_gradients(registry, "MatMul", transposes(transpose_a, transpose_b, 0.3),
                                                   operand_shapes({2, 3}, 4, 5, 6, transpose_a, transpose_b))))
          << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
      EXPECT_TRUE(testing::gradients_match(check_gradients(registry, "MatMul", transposes(transpose_a, transpose_b),
                                                           operand_shapes({}, 3, 7, 2, transpose_a, transpose_b))))
          << "rank 2, transpose_a " << transpose_a << ", transpose_b " << transpose_b;
    }
}

TEST(MatMul, GradientsCudaUnderEveryTranspose) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true})
      EXPECT_TRUE(testing::gradients_match(
          check_gradients(registry, "MatMul", transposes(transpose_a, transpose_b, 0.3),
                          operand_shapes({2, 3}, 4, 5, 6, transpose_a, transpose_b), Device::cuda())))
          << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
}

TEST(MatMul, ParityCpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      // Window attention's sizes: 8x8 windows (64 tokens), 4 heads of 32 channels.
      EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MatMul", transposes(transpose_a, transpose_b, 0.125),
                                                      operand_shapes({6, 4}, 64, 32, 64, transpose_a, transpose_b))))
          << "transpose_a " << transpose_a << ", transpose_b " << transpose_b;
      ParityOptions f64;
      f64.dtype = DType::f64;
      EXPECT_TRUE(testing::outputs_match(check_parity(registry, "MatMul", transposes(transpose_a, transpose_b),
                                                      operand_shapes({3}, 7, 9, 5, transpose_a, transpose_b), f64)))
          << "f64, transpose_a " << transpose_a << ", transpose_b " << transpose_b;
    }
}

TEST(MatMul, RejectsBatchDimensionsThatDiffer) {
  auto layer = registry.create("MatMul", "qk", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 4, 8, 16}, {2, 3, 16, 8}}); });
  EXPECT_TRUE(testing::contains(message,
                                "node 'qk' (MatMul): A [2, 4, 8, 16] and B [2, 3, 16, 8] have batch "
                                "dimensions (all but the last two) [2, 4] and [2, 3]; MatMul needs them equal"))
      << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 8, 16}, {16, 8}}); });
  EXPECT_TRUE(testing::contains(message, "A [2, 8, 16] and B [16, 8] have batch dimensions")) << message;
}

TEST(MatMul, RejectsInnerDimensionsThatDiffer) {
  auto layer = registry.create("MatMul", "qk", transposes(false, true));
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{2, 64, 32}, {2, 64, 16}}); });
  EXPECT_TRUE(testing::contains(message, "node 'qk' (MatMul): A [2, 64, 32] gives op(A) [64, 32] and B [2, 64, 16] "
                                         "gives op(B) [16, 64] (transpose_a false, transpose_b true): op(A)'s "
                                         "columns (32) must equal op(B)'s rows (16)"))
      << message;
}

TEST(MatMul, RejectsAnInputWithoutAMatrixAndAThirdInput) {
  auto layer = registry.create("MatMul", "qk", {});
  std::string message = testing::shape_error_of([&] { layer->output_shapes({{8}, {8, 2}}); });
  EXPECT_TRUE(testing::contains(message, "node 'qk' (MatMul): input 0 (A) is [8]; MatMul needs [..., rows, columns]"))
      << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 8}, {8}}); });
  EXPECT_TRUE(testing::contains(message, "input 1 (B) is [8]")) << message;
  message = testing::shape_error_of([&] { layer->output_shapes({{2, 2}, {2, 2}, {2, 2}}); });
  EXPECT_TRUE(testing::contains(message, "node 'qk' (MatMul): takes 2 inputs (A and B), got 3")) << message;
}

TEST(MatMul, RejectsAZeroScale) {
  std::string message = testing::config_error_of([&] { registry.create("MatMul", "qk", {{"scale", 0.0}}); });
  EXPECT_TRUE(testing::contains(message, "qk")) << message;
  EXPECT_TRUE(testing::contains(message, "scale")) << message;
  EXPECT_TRUE(testing::contains(message, "must be a finite non-zero number")) << message;
}

// softmax(Q K^T / sqrt(d)) V over B windows of T tokens with d channels, as a spec would write it.
const char* kAttentionSpec = R"({
  "name": "single-head-attention",
  "inputs": ["q", "k", "v"],
  "nodes": [
    {"name": "attn_scores", "type": "MatMul", "inputs": ["q", "k"], "outputs": ["scores"],
     "params": {"transpose_b": true, "scale": 0.5}},
    {"name": "attn_softmax", "type": "Softmax", "inputs": ["scores"], "outputs": ["weights"], "params": {"axis": -1}},
    {"name": "attn_values", "type": "MatMul", "inputs": ["weights", "v"], "outputs": ["attended"]}
  ]
})";

TEST(MatMul, SingleHeadAttentionInJsonMatchesPlainLoops) {
  const std::int64_t windows = 3, tokens = 5, channels = 4;  // scale 0.5 = 1/sqrt(channels)
  const Shape shape{windows, tokens, channels};
  Net net(ModelSpec::from_text(kAttentionSpec, "attention.json"), registry, {{"q", shape}, {"k", shape}, {"v", shape}},
          DType::f64);
  std::vector<double> q(windows * tokens * channels), k(q.size()), v(q.size());
  for (std::size_t e = 0; e < q.size(); ++e) {
    q[e] = std::sin(0.9 * static_cast<double>(e));
    k[e] = std::cos(1.3 * static_cast<double>(e));
    v[e] = std::sin(0.4 * static_cast<double>(e) + 1.0);
  }
  net.input("q").copy_from(Tensor::from_values(q, shape, DType::f64));
  net.input("k").copy_from(Tensor::from_values(k, shape, DType::f64));
  net.input("v").copy_from(Tensor::from_values(v, shape, DType::f64));
  Context ctx;
  net.forward(ctx);
  ASSERT_EQ(net.blob("scores").shape(), (Shape{windows, tokens, tokens}));
  const std::vector<double> attended = net.blob("attended").to_values();
  ASSERT_EQ(attended.size(), q.size());
  auto at = [&](const std::vector<double>& x, std::int64_t w, std::int64_t t, std::int64_t c) {
    return x[(w * tokens + t) * channels + c];
  };
  for (std::int64_t w = 0; w < windows; ++w)
    for (std::int64_t i = 0; i < tokens; ++i) {
      std::vector<double> weight(tokens);
      double total = 0;
      for (std::int64_t j = 0; j < tokens; ++j) {
        double score = 0;
        for (std::int64_t c = 0; c < channels; ++c) score += at(q, w, i, c) * at(k, w, j, c);
        weight[j] = std::exp(score / std::sqrt(static_cast<double>(channels)));
        total += weight[j];
      }
      for (std::int64_t c = 0; c < channels; ++c) {
        double expected = 0;
        for (std::int64_t j = 0; j < tokens; ++j) expected += weight[j] / total * at(v, w, j, c);
        EXPECT_NEAR(at(attended, w, i, c), expected, 1e-12) << "window " << w << ", token " << i << ", channel " << c;
      }
    }
}

}  // namespace
}  // namespace plexus

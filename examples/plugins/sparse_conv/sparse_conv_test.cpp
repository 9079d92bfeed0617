// Tests of SparseConv2d / SparseConvTranspose2d through Plexus's public API
// (the built libsparse_conv.so, loaded by path): the two sparse formats
// against a hand-built filter; the forward against Plexus's built-in dense
// convolutions (an independent implementation) with the same pruned
// weights, for both formats, odd shapes, strides and paddings; input
// gradient checks (CPU f64; CUDA on a GPU); CPU/CUDA parity, also with
// poisoned (NaN-filled) outputs and input gradients; a tiny pruned
// autoencoder whose decoder, run with the sparse layers, gives the same
// reconstruction and PSNR; and the error messages.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/checkpoint.h"
#include "plexus/gradcheck.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/plugin.h"
#include "plexus/testing/gtest_helpers.h"
#include "plugin_test_support.h"
#include "sparse_filter.h"

namespace {

using plexus::Device;
using plexus::DType;
using plexus::Shape;
using plexus::Tensor;

const CudaProbe kCudaProbe{"SparseConv2d", {{"out_channels", 1}, {"kernel", 1}}};

// About 70% of the weights set to zero, the rest moved away from zero.
void pruned_weights(const std::string& name, std::vector<double>& values, std::mt19937_64& rng) {
  if (name != "weight") return;
  std::bernoulli_distribution keep(0.3);
  std::uniform_real_distribution<double> magnitude(0.1, 0.5);
  std::bernoulli_distribution negative(0.5);
  for (double& v : values) v = keep(rng) ? (negative(rng) ? -1 : 1) * magnitude(rng) : 0.0;
}

struct Case {
  std::string type;  // the sparse type; the dense one is the same without "Sparse"
  nlohmann::json params;
  Shape input;
};

std::vector<Case> cases() {
  std::vector<Case> result;
  for (const char* format : {"rows", "coo"}) {
    result.push_back({"SparseConv2d",
                      {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"format", format}},
                      {2, 3, 7, 6}});
    result.push_back(
        {"SparseConv2d",
         {{"out_channels", 5}, {"kernel", 5}, {"stride", 3}, {"padding", 2}, {"bias", false}, {"format", format}},
         {1, 2, 11, 9}});
    result.push_back({"SparseConv2d", {{"out_channels", 3}, {"kernel", 1}, {"format", format}}, {2, 5, 3, 1}});
    result.push_back(
        {"SparseConvTranspose2d",
         {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}, {"format", format}},
         {2, 4, 3, 5}});
    result.push_back(
        {"SparseConvTranspose2d",
         {{"out_channels", 2}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}, {"format", format}},
         {1, 3, 2, 3}});
    result.push_back({"SparseConvTranspose2d",
                      {{"out_channels", 4}, {"kernel", 3}, {"padding", 0}, {"format", format}},
                      {1, 2, 4, 3}});
  }
  return result;
}

std::string dense_type(const std::string& sparse_type) { return sparse_type.substr(std::string("Sparse").size()); }

nlohmann::json dense_params(nlohmann::json params) {
  params.erase("format");
  return params;
}

std::unique_ptr<plexus::Layer> make(const std::string& type, const nlohmann::json& params, const Shape& input,
                                    DType dtype, Device device) {
  auto layer = plugin_registry().create(type, "l", params);
  layer->output_shapes({input});
  layer->create_parameters({input});
  std::mt19937_64 rng(1);
  layer->initialize_parameters(dtype, device, rng);
  return layer;
}

std::vector<double> random_values(std::int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> values(static_cast<std::size_t>(n));
  for (double& v : values) v = u(rng);
  return values;
}

// ---- the formats, by hand ----

TEST(SparseFilter, CooAndRowsHoldTheNonZerosOfAHandMadeFilter) {
  // W [small 2][big 3][2][2], non-zeros at (0,1,0,1) = 5, (0,2,1,0) = -2, (1,0,0,0) = 7, (1,2,1,1) = 3.
  std::vector<double> w(2 * 3 * 2 * 2, 0.0);
  auto at = [](int a, int b, int ky, int kx) { return ((a * 3 + b) * 2 + ky) * 2 + kx; };
  w[at(0, 1, 0, 1)] = 5;
  w[at(0, 2, 1, 0)] = -2;
  w[at(1, 0, 0, 0)] = 7;
  w[at(1, 2, 1, 1)] = 3;
  const sparse_conv::SparseFilter f = sparse_conv::build_sparse_filter(w, 2, 3, 2);
  ASSERT_EQ(f.nonzeros(), 4);
  EXPECT_EQ(f.coo.value, (std::vector<double>{5, -2, 7, 3}));
  EXPECT_EQ(f.coo.small_channel, (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(f.coo.big_channel, (std::vector<std::int32_t>{1, 2, 0, 2}));
  EXPECT_EQ(f.coo.ky, (std::vector<std::int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(f.coo.kx, (std::vector<std::int32_t>{1, 0, 0, 1}));
  ASSERT_TRUE(f.has_rows);
  EXPECT_EQ(f.by_small.row_start, (std::vector<std::int32_t>{0, 2, 4}));
  EXPECT_EQ(f.by_small.value, (std::vector<double>{5, -2, 7, 3}));
  // tap = source channel << 8 | ky << 4 | kx
  EXPECT_EQ(f.by_small.tap, (std::vector<std::uint16_t>{0x101, 0x210, 0x000, 0x211}));
  EXPECT_EQ(f.by_big.row_start, (std::vector<std::int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(f.by_big.value, (std::vector<double>{7, 5, -2, 3}));
  EXPECT_EQ(f.by_big.tap, (std::vector<std::uint16_t>{0x100, 0x001, 0x010, 0x111}));
  // Stride 2, padding 1: big-side rows by (big channel, phase); a tap (ky, kx)
  // has phase ((ky - 1) mod 2, (kx - 1) mod 2), row b * 4 + phase_y * 2 + phase_x.
  const sparse_conv::SparseFilter strided = sparse_conv::build_sparse_filter(w, 2, 3, 2, 2, 1);
  EXPECT_EQ(strided.by_small.row_start, f.by_small.row_start);
  EXPECT_EQ(strided.by_big.row_start, (std::vector<std::int32_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4, 4, 4}));
  EXPECT_EQ(strided.by_big.value, (std::vector<double>{7, 5, 3, -2}));  // rows 3, 6, 8, 9
  EXPECT_EQ(strided.by_big.tap, (std::vector<std::uint16_t>{0x100, 0x001, 0x111, 0x010}));
  EXPECT_EQ(sparse_conv::coo_bytes(4, 4), 4 * 20);
  EXPECT_EQ(sparse_conv::rows_bytes(4, 2, 4), 4 * 6 + 3 * 4);
}

// ---- forward against the built-in dense layers ----

TEST(SparseConv, ForwardMatchesTheBuiltInDenseLayerWithTheSameWeights) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.type + " " + c.params.dump());
    auto sparse = make(c.type, c.params, c.input, DType::f64, Device::cpu());
    auto dense = make(dense_type(c.type), dense_params(c.params), c.input, DType::f64, Device::cpu());
    std::mt19937_64 rng(7);
    std::vector<double> w = sparse->parameter("weight").value.to_values();
    pruned_weights("weight", w, rng);
    sparse->parameter("weight").value = Tensor::from_values(w, sparse->parameter("weight").shape, DType::f64);
    dense->parameter("weight").value = sparse->parameter("weight").value.clone();
    if (c.params.value("bias", true)) {
      std::vector<double> b = random_values(sparse->parameter("bias").value.numel(), rng);
      sparse->parameter("bias").value = Tensor::from_values(b, sparse->parameter("bias").shape, DType::f64);
      dense->parameter("bias").value = sparse->parameter("bias").value.clone();
    }
    const Shape out_shape = dense->output_shapes({c.input})[0];
    ASSERT_EQ(sparse->output_shapes({c.input})[0], out_shape);
    Tensor x = Tensor::from_values(random_values(plexus::shape_numel(c.input), rng), c.input, DType::f64);
    Tensor y_sparse(out_shape, DType::f64), y_dense(out_shape, DType::f64);
    plexus::Context ctx;
    sparse->forward(ctx, {&x}, {&y_sparse});
    dense->forward(ctx, {&x}, {&y_dense});
    const std::vector<double> a = y_sparse.to_values(), b = y_dense.to_values();
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << "element " << i;
    // The input gradient too.
    Tensor dy = Tensor::from_values(random_values(plexus::shape_numel(out_shape), rng), out_shape, DType::f64);
    Tensor dx_sparse(c.input, DType::f64), dx_dense(c.input, DType::f64);
    sparse->backward(ctx, {&x}, {&y_sparse}, {&dy}, {&dx_sparse});
    dense->backward(ctx, {&x}, {&y_dense}, {&dy}, {&dx_dense});
    const std::vector<double> ga = dx_sparse.to_values(), gb = dx_dense.to_values();
    for (std::size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], gb[i], 1e-12) << "input gradient " << i;
  }
}

// ---- gradients and parity ----

TEST(SparseConv, InputGradientsCpu) {
  plexus::GradCheckOptions options;
  options.parameter_filler = pruned_weights;
  for (const Case& c : cases())
    EXPECT_TRUE(plexus::testing::gradients_match(
        plexus::check_gradients(plugin_registry(), c.type, c.params, {c.input}, Device::cpu(), options)));
}

TEST(SparseConv, InputGradientsCuda) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  plexus::GradCheckOptions options;
  options.parameter_filler = pruned_weights;
  for (const Case& c : cases())
    EXPECT_TRUE(plexus::testing::gradients_match(
        plexus::check_gradients(plugin_registry(), c.type, c.params, {c.input}, Device::cuda(), options)));
}

TEST(SparseConv, ParityCpuCuda) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  plexus::ParityOptions options;
  options.parameter_filler = pruned_weights;
  for (const Case& c : cases()) {
    Shape bigger = c.input;
    bigger[0] = 3;
    bigger[2] += 13;  // more than one 256-thread tile of pixels
    bigger[3] += 21;
    EXPECT_TRUE(
        plexus::testing::outputs_match(plexus::check_parity(plugin_registry(), c.type, c.params, {bigger}, options)));
  }
}

// Outputs and input gradients filled with NaN before the CUDA calls: every
// element must be written (and equal the CPU's).
TEST(SparseConv, CudaWritesEveryElementOverPoisonedBuffers) {
  SKIP_WITHOUT_CUDA(kCudaProbe);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.type + " " + c.params.dump());
    auto cpu = make(c.type, c.params, c.input, DType::f32, Device::cpu());
    auto gpu = make(c.type, c.params, c.input, DType::f32, Device::cuda());
    std::mt19937_64 rng(3);
    std::vector<double> w = cpu->parameter("weight").value.to_values();
    pruned_weights("weight", w, rng);
    cpu->parameter("weight").value = Tensor::from_values(w, cpu->parameter("weight").shape, DType::f32);
    gpu->parameter("weight").value.copy_from(cpu->parameter("weight").value);
    if (c.params.value("bias", true)) gpu->parameter("bias").value.copy_from(cpu->parameter("bias").value);
    const Shape out_shape = cpu->output_shapes({c.input})[0];
    const std::vector<double> x_values = random_values(plexus::shape_numel(c.input), rng);
    const std::vector<double> dy_values = random_values(plexus::shape_numel(out_shape), rng);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> results[2][2];
    for (int side = 0; side < 2; ++side) {
      const Device device = side == 0 ? Device::cpu() : Device::cuda();
      plexus::Layer& layer = side == 0 ? *cpu : *gpu;
      plexus::Context ctx(device);
      Tensor x = Tensor::from_values(x_values, c.input, DType::f32, device);
      Tensor dy = Tensor::from_values(dy_values, out_shape, DType::f32, device);
      Tensor y =
          Tensor::from_values(std::vector<double>(plexus::shape_numel(out_shape), nan), out_shape, DType::f32, device);
      Tensor dx =
          Tensor::from_values(std::vector<double>(plexus::shape_numel(c.input), nan), c.input, DType::f32, device);
      layer.forward(ctx, {&x}, {&y});
      layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
      ctx.synchronize();
      results[side][0] = y.to_values();
      results[side][1] = dx.to_values();
    }
    for (int k = 0; k < 2; ++k)
      for (std::size_t i = 0; i < results[0][k].size(); ++i) {
        ASSERT_TRUE(std::isfinite(results[1][k][i])) << (k ? "input gradient " : "output ") << i;
        ASSERT_NEAR(results[1][k][i], results[0][k][i], 1e-4 * std::max(1.0, std::abs(results[0][k][i])))
            << (k ? "input gradient " : "output ") << i;
      }
  }
}

// ---- a pruned decoder, evaluated with the sparse layers ----

std::string tiny_autoencoder(const std::string& decoder_type, const std::string& decoder_extra) {
  return R"({
    "name": "tiny-)" +
         decoder_type + R"(",
    "inputs": ["image"],
    "nodes": [
      {"name": "g_a0", "type": "Conv2d", "inputs": ["image"], "outputs": ["g_a0_out"], "params": {"out_channels": 8, "kernel": 5, "stride": 2, "padding": 2}},
      {"name": "g_a0_gdn", "type": "GDN", "inputs": ["g_a0_out"], "outputs": ["g_a0_norm"]},
      {"name": "g_a1", "type": "Conv2d", "inputs": ["g_a0_norm"], "outputs": ["y"], "params": {"out_channels": 8, "kernel": 5, "stride": 2, "padding": 2}},
      {"name": "quantizer", "type": "UniformNoise", "inputs": ["y"], "outputs": ["y_hat"]},
      {"name": "entropy_model", "type": "FactorizedEntropyModel", "inputs": ["y_hat"], "outputs": ["likelihoods"]},
      {"name": "g_s0", "type": ")" +
         decoder_type +
         R"(", "inputs": ["y_hat"], "outputs": ["g_s0_out"], "params": {"out_channels": 8, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1)" +
         decoder_extra + R"(}},
      {"name": "g_s0_igdn", "type": "IGDN", "inputs": ["g_s0_out"], "outputs": ["g_s0_norm"]},
      {"name": "g_s1", "type": ")" +
         decoder_type +
         R"(", "inputs": ["g_s0_norm"], "outputs": ["x_hat"], "params": {"out_channels": 3, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1)" +
         decoder_extra + R"(}},
      {"name": "distortion", "type": "MSELoss", "inputs": ["x_hat", "image"], "outputs": ["mse"]},
      {"name": "rate", "type": "RateLoss", "inputs": ["likelihoods", "image"], "outputs": ["bpp"]}
    ]})";
}

TEST(SparseConv, APrunedDecoderGivesTheSamePsnrWithTheSparseLayers) {
  const Shape image{2, 3, 16, 16};
  plexus::Context ctx(Device::cpu(), 5);
  plexus::Net pruned(
      plexus::ModelSpec::from_text(tiny_autoencoder(
          "PrunedConvTranspose2d", R"(, "sparsity": 0.8, "start_step": 0, "end_step": 6, "prune_every": 2)")),
      plugin_registry(), {{"image", image}}, DType::f32, Device::cpu(), 5);
  // A few Adam steps on a smooth image while the decoder is pruned to 80%.
  std::vector<double> pixels(static_cast<std::size_t>(plexus::shape_numel(image)));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = 0.5 + 0.4 * std::sin(0.37 * static_cast<double>(i));
  pruned.input("image").copy_from(Tensor::from_values(pixels, image, DType::f32));
  plexus::Adam adam(0.01);
  for (int t = 1; t <= 8; ++t) {
    pruned.zero_grad();
    pruned.forward(ctx);
    pruned.backward(ctx, {{"mse", 1000.0}, {"bpp", 1.0}});
    adam.step(ctx, pruned.trainable_parameters());
    pruned.after_update(ctx, t);
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("sparse_conv_test_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  plexus::save_checkpoint(path, pruned, nullptr, 8);

  plexus::Net sparse(plexus::ModelSpec::from_text(tiny_autoencoder("SparseConvTranspose2d", "")), plugin_registry(),
                     {{"image", image}}, DType::f32, Device::cpu(), 9);
  plexus::load_checkpoint(path, sparse, nullptr);
  std::filesystem::remove(path);
  int zeros = 0, total = 0;
  for (const char* node : {"g_s0", "g_s1"})
    for (double v : sparse.layer(node).parameter("weight").value.to_values()) {
      zeros += v == 0.0;
      ++total;
    }
  EXPECT_EQ(zeros, static_cast<int>(std::lround(0.8 * 8 * 8 * 25)) + static_cast<int>(std::lround(0.8 * 8 * 3 * 25)));

  ctx.set_training(false);  // rounding instead of noise: the evaluation path
  sparse.input("image").copy_from(pruned.input("image"));
  pruned.forward(ctx);
  sparse.forward(ctx);
  const double psnr_pruned = 10 * std::log10(1 / pruned.scalar("mse"));
  const double psnr_sparse = 10 * std::log10(1 / sparse.scalar("mse"));
  EXPECT_NEAR(psnr_sparse, psnr_pruned, 1e-4);
  EXPECT_EQ(sparse.scalar("bpp"), pruned.scalar("bpp"));
  const std::vector<double> a = pruned.blob("x_hat").to_values(), b = sparse.blob("x_hat").to_values();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
}

// ---- errors ----

std::string error_of(const std::string& type, const nlohmann::json& params, const Shape& input = {1, 3, 8, 8}) {
  try {
    auto layer = plugin_registry().create(type, "s", params);
    layer->output_shapes({input});
  } catch (const plexus::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(SparseConv, RejectsWhatItCannotRun) {
  EXPECT_EQ(error_of("SparseConv2d", {{"out_channels", 4}, {"kernel", 3}, {"format", "csr"}}),
            "node 's' (SparseConv2d): parameter 'format' must be \"rows\" or \"coo\", got \"csr\"");
  EXPECT_NE(error_of("SparseConv2d", {{"out_channels", 4}, {"kernel", 17}}).find("must be <= 16 for format \"rows\""),
            std::string::npos);
  EXPECT_EQ(error_of("SparseConv2d", {{"out_channels", 4}, {"kernel", 17}, {"format", "coo"}}, {1, 3, 20, 20}),
            "no error");
  // The built-in layer's shape checks, naming this layer's type.
  EXPECT_EQ(error_of("SparseConv2d", {{"out_channels", 4}, {"kernel", 9}}, {1, 3, 4, 4}),
            "node 's' (SparseConv2d): input [1, 3, 4, 4] with padding 0 is smaller than the 9x9 kernel: the output "
            "would be empty");
  EXPECT_NE(error_of("SparseConvTranspose2d", {{"out_channels", 300}, {"kernel", 3}}).find("at most 256 channels"),
            std::string::npos);
  EXPECT_NE(error_of("SparseConv2d", {{"kernel", 3}}).find("'out_channels' is required"), std::string::npos);
}

}  // namespace

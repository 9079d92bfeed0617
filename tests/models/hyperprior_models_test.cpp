// The bundled hyperprior specs (models/specs/), each against what it is
// built after: its parameter count worked out by hand (CompressAI's
// ScaleHyperprior and MeanScaleHyperprior; TCM's blocks for tcm-small), the
// tensor names the app's contract needs, a stride of 64, and:
// - bmshj2018-hyperprior: "bpp" = the bits of both latents, recomputed here
//   from the likelihood blobs;
// - mbt2018-mean: the means reaching the Gaussian conditional, rounding
//   around the means in eval, and a gradient for every parameter;
// - tcm-small: the windows of its attention blocks, shifted in every other
//   block, and a gradient for every parameter;
// - elic: its groups and contexts, and a gradient for every parameter.
// - mbt2018: its context model's and entropy parameters' tensors, and a
//   gradient for every parameter and for the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/context.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

ModelSpec hyperprior_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-hyperprior.json");
}

TEST(HyperpriorModel, HasCompressAIsParameterCountAndTensorNames) {
  const ModelSpec spec = hyperprior_spec();
  codec::check_contract(spec);
  Net net(spec, registry, {{"image", Shape{1, 3, 128, 192}}});
  // CompressAI ScaleHyperprior(N=128, M=192), weights + biases:
  //   g_a: conv 3->N 5x5 (9,728), 3 GDN(N) (3 x 16,512), 2 conv N->N 5x5 (2 x 409,728), conv N->M 5x5 (614,592)
  //   g_s: deconv M->N (614,528), 3 IGDN (49,536), 2 deconv N->N (819,456), deconv N->3 (9,603)
  //   h_a: conv M->N 3x3 (221,312), 2 conv N->N 5x5 (819,456)
  //   h_s: 2 deconv N->N 5x5 (819,456), 3x3 N->M (221,376)
  //   entropy bottleneck: 43 per channel x N (5,504; its quantiles are not parameters here)
  const std::int64_t expected = 9728 + 3 * 16512 + 2 * 409728 + 614592 + 614528 + 49536 + 819456 + 9603 + 221312 +
                                819456 + 819456 + 221376 + 43 * 128;
  EXPECT_EQ(net.parameter_count(), expected);
  EXPECT_EQ(net.blob("y").shape(), (Shape{1, 192, 8, 12}));
  EXPECT_EQ(net.blob("y_hat").shape(), (Shape{1, 192, 8, 12}));
  EXPECT_EQ(net.blob("scales").shape(), (Shape{1, 192, 8, 12}));
  EXPECT_EQ(net.blob("likelihoods").shape(), (Shape{1, 192, 8, 12}));
  EXPECT_EQ(net.blob("z").shape(), (Shape{1, 128, 2, 3}));
  EXPECT_EQ(net.blob("z_hat").shape(), (Shape{1, 128, 2, 3}));
  EXPECT_EQ(net.blob("z_likelihoods").shape(), (Shape{1, 128, 2, 3}));
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 128, 192}));
  EXPECT_EQ(net.layer("gaussian_conditional").type(), "GaussianConditional");
  EXPECT_EQ(net.layer("hyper_entropy_model").type(), "FactorizedEntropyModel");
}

TEST(HyperpriorModel, StrideIsSetByTheHyperLatent) {
  EXPECT_EQ(codec::derive_stride(hyperprior_spec(), registry), 64);
  const ModelSpec factorized =
      ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-factorized.json");
  EXPECT_EQ(codec::derive_stride(factorized, registry), 16);
}

TEST(HyperpriorModel, RateIsTheBitsOfBothLatents) {
  Net net(hyperprior_spec(), registry, {{"image", Shape{2, 3, 64, 64}}}, DType::f32, Device::cpu(), 5);
  std::vector<double> image(2 * 3 * 64 * 64);
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = 0.5 + 0.4 * std::sin(0.01 * static_cast<double>(i));
  net.input("image").copy_from(Tensor::from_values(image, {2, 3, 64, 64}));
  for (bool training : {false, true}) {
    Context ctx(Device::cpu(), 7);
    ctx.set_training(training);
    net.forward(ctx);
    auto bits_of = [&](const char* blob) {
      double bits = 0;
      for (double p : net.blob(blob).to_values()) bits -= std::log2(p);
      return bits;
    };
    const double y_bits = bits_of("likelihoods"), z_bits = bits_of("z_likelihoods");
    ASSERT_GT(z_bits, 0.0);  // the hyper-latent costs something, so leaving it out would show
    const double bits = y_bits + z_bits;
    EXPECT_NEAR(net.scalar("bpp"), bits / (2 * 64 * 64), 1e-4 * bits / (2 * 64 * 64)) << "training " << training;
  }
}

ModelSpec mean_scale_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018-mean.json");
}

// Weights and biases of a k x k convolution (or transposed convolution) from
// `in` to `out` channels, and of a GDN over c channels (beta c, gamma c x c).
std::int64_t conv(std::int64_t in, std::int64_t out, std::int64_t k) { return in * out * k * k + out; }
std::int64_t gdn(std::int64_t c) { return c * c + c; }

TEST(MeanScaleHyperpriorModel, HasCompressAIsParameterCountAndTensorNames) {
  const ModelSpec spec = mean_scale_spec();
  codec::check_contract(spec);
  Net net(spec, registry, {{"image", Shape{1, 3, 128, 192}}});
  // CompressAI MeanScaleHyperprior(N=128, M=192):
  //   g_a: conv 3->N 5x5, GDN, conv N->N 5x5, GDN, conv N->N 5x5, GDN, conv N->M 5x5
  //   g_s: deconv M->N 5x5, IGDN, deconv N->N, IGDN, deconv N->N, IGDN, deconv N->3
  //   h_a: conv M->N 3x3, conv N->N 5x5, conv N->N 5x5 (LeakyReLUs have none)
  //   h_s: deconv N->M 5x5, deconv M->3M/2 5x5, conv 3M/2->2M 3x3
  //   entropy bottleneck, filters (3, 3, 3): per channel matrices 3 + 9 + 9 + 3,
  //   biases 3 + 3 + 3 + 1, factors 3 + 3 + 3 = 43 (its quantiles are not parameters here)
  const std::int64_t n = 128, m = 192;
  const std::int64_t g_a = conv(3, n, 5) + 2 * conv(n, n, 5) + conv(n, m, 5) + 3 * gdn(n);
  const std::int64_t g_s = conv(m, n, 5) + 2 * conv(n, n, 5) + conv(n, 3, 5) + 3 * gdn(n);
  const std::int64_t h_a = conv(m, n, 3) + 2 * conv(n, n, 5);
  const std::int64_t h_s = conv(n, m, 5) + conv(m, m * 3 / 2, 5) + conv(m * 3 / 2, 2 * m, 3);
  const std::int64_t expected = g_a + g_s + h_a + h_s + 43 * n;
  // The same sum in numbers: g_a 1,493,312 + g_s 1,493,123 + h_a 1,040,768 + h_s 2,992,992 + 5,504.
  EXPECT_EQ(expected, 7025699);
  EXPECT_EQ(net.parameter_count(), expected);
  for (const char* blob : {"y", "y_hat", "scales", "means", "likelihoods"})
    EXPECT_EQ(net.blob(blob).shape(), (Shape{1, 192, 8, 12})) << blob;
  EXPECT_EQ(net.blob("gaussian_params").shape(), (Shape{1, 384, 8, 12}));
  for (const char* blob : {"z", "z_hat", "z_likelihoods"})
    EXPECT_EQ(net.blob(blob).shape(), (Shape{1, 128, 2, 3})) << blob;
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 128, 192}));
  EXPECT_EQ(net.layer("quantizer").type(), "QuantizeAroundMean");
  EXPECT_EQ(net.layer("gaussian_conditional").type(), "GaussianConditional");
  EXPECT_EQ(net.layer("hyper_entropy_model").type(), "FactorizedEntropyModel");
  EXPECT_EQ(net.layer("h_a0_act").type(), "LeakyReLU");
  EXPECT_EQ(net.layer("h_s2").type(), "Conv2d");
}

TEST(MeanScaleHyperpriorModel, StrideIsSetByTheHyperLatent) {
  EXPECT_EQ(codec::derive_stride(mean_scale_spec(), registry), 64);
}

void fill_image(Net& net, const Shape& shape) {
  std::vector<double> image(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = 0.5 + 0.4 * std::sin(0.01 * static_cast<double>(i));
  net.input("image").copy_from(Tensor::from_values(image, shape, net.dtype()));
}

// Eval: y_hat - means is an integer everywhere and "bpp" is the bits of both
// latents; the likelihoods are those of y_hat given the means.
TEST(MeanScaleHyperpriorModel, EvalRoundsAroundTheMeansAndCountsBothLatents) {
  const Shape shape{2, 3, 64, 64};
  Net net(mean_scale_spec(), registry, {{"image", shape}}, DType::f64, Device::cpu(), 5);
  fill_image(net, shape);
  Context ctx(Device::cpu(), 7);
  ctx.set_training(false);
  net.forward(ctx);
  const std::vector<double> y = net.blob("y").to_values(), y_hat = net.blob("y_hat").to_values(),
                            means = net.blob("means").to_values();
  int off_mean = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y_hat[i] - means[i], std::round(y[i] - means[i]), 1e-9) << i;
    off_mean += std::abs(y_hat[i] - std::round(y[i])) > 1e-6;  // differs from plain rounding
  }
  EXPECT_GT(off_mean, 0);
  double bits = 0;
  for (const char* blob : {"likelihoods", "z_likelihoods"})
    for (double p : net.blob(blob).to_values()) bits -= std::log2(p);
  EXPECT_NEAR(net.scalar("bpp"), bits / (2 * 64 * 64), 1e-9 * bits);
}

// One training step's backward on the CPU (f32, a 64x64 image, the loss
// lambda * 255^2 * mse + bpp): every parameter's gradient is finite and not
// all zero, and so is that of the blob `reached` (when given).
void expect_every_parameter_gets_a_gradient(const ModelSpec& spec, const std::string& reached = "") {
  const Shape shape{1, 3, 64, 64};
  Net net(spec, registry, {{"image", shape}}, DType::f32, Device::cpu(), 5);
  fill_image(net, shape);
  Context ctx(Device::cpu(), 7);
  ctx.set_training(true);
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"mse", codec::distortion_weight(0.01)}, {"bpp", 1.0}});
  const std::vector<NamedParameter> parameters = net.trainable_parameters();
  ASSERT_FALSE(parameters.empty());
  for (const NamedParameter& named : parameters) {
    double largest = 0;
    for (double g : named.parameter->grad.to_values()) {
      ASSERT_TRUE(std::isfinite(g)) << named.name;
      largest = std::max(largest, std::abs(g));
    }
    EXPECT_GT(largest, 0.0) << named.name << " has no gradient";
  }
  if (reached.empty()) return;
  double largest = 0;
  for (double g : net.blob_grad(reached).to_values()) largest = std::max(largest, std::abs(g));
  EXPECT_GT(largest, 0.0) << reached << " has no gradient";
}

// The means are learned through the rate (QuantizeAroundMean passes them
// none): GaussianConditional's means input must carry a gradient back.
TEST(MeanScaleHyperpriorModel, EveryParameterGetsAGradient) {
  expect_every_parameter_gets_a_gradient(mean_scale_spec(), "means");
}

ModelSpec mbt2018_spec() { return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018.json"); }

TEST(JointAutoregressiveModel, HasCompressAIsParameterCountAndTensorNames) {
  const ModelSpec spec = mbt2018_spec();
  codec::check_contract(spec);
  Net net(spec, registry, {{"image", Shape{1, 3, 128, 192}}});
  // CompressAI JointAutoregressiveHierarchicalPriors(N=192, M=192): MeanScaleHyperprior's transforms (above)
  // with N = 192, h_a's first conv M->N 3x3, plus context_prediction, a MaskedConv2d M->2M 5x5 (its whole
  // weight, the masked taps too), and entropy_parameters, 1x1 convs 4M->10M/3->8M/3->2M.
  const std::int64_t n = 192, m = 192;
  const std::int64_t g_a = conv(3, n, 5) + 2 * conv(n, n, 5) + conv(n, m, 5) + 3 * gdn(n);
  const std::int64_t g_s = conv(m, n, 5) + 2 * conv(n, n, 5) + conv(n, 3, 5) + 3 * gdn(n);
  const std::int64_t h_a = conv(m, n, 3) + 2 * conv(n, n, 5);
  const std::int64_t h_s = conv(n, m, 5) + conv(m, m * 3 / 2, 5) + conv(m * 3 / 2, 2 * m, 3);
  const std::int64_t context = conv(m, 2 * m, 5);
  const std::int64_t parameters =
      conv(4 * m, 10 * m / 3, 1) + conv(10 * m / 3, 8 * m / 3, 1) + conv(8 * m / 3, 2 * m, 1);
  const std::int64_t expected = g_a + g_s + h_a + h_s + context + parameters + 43 * n;
  EXPECT_EQ(expected, 14127011);  // the same sum in numbers
  EXPECT_EQ(net.parameter_count(), expected);
  for (const char* blob : {"y", "y_context", "y_hat", "scales", "means", "likelihoods"})
    EXPECT_EQ(net.blob(blob).shape(), (Shape{1, 192, 8, 12})) << blob;
  for (const char* blob : {"hyper_params", "context", "gaussian_params"})
    EXPECT_EQ(net.blob(blob).shape(), (Shape{1, 384, 8, 12})) << blob;
  EXPECT_EQ(net.blob("entropy_parameters_in").shape(), (Shape{1, 768, 8, 12}));
  EXPECT_EQ(net.blob("z_hat").shape(), (Shape{1, 192, 2, 3}));
  EXPECT_EQ(net.layer("context_prediction").type(), "Conv2d");
  EXPECT_EQ(spec.codec["y"]["type"], "autoregressive");
  EXPECT_EQ(codec::derive_stride(spec, registry), 64);
}

// The context is learned through the rate too, and its masked taps are not.
TEST(JointAutoregressiveModel, EveryParameterGetsAGradient) {
  expect_every_parameter_gets_a_gradient(mbt2018_spec(), "context");
}

ModelSpec tcm_small_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/tcm-small.json");
}

// TCM's blocks (Liu, Sun, Katto 2023), as models/builders/spec_builder.py
// writes them, with the weights and biases of conv() and GDN's gdn():
std::int64_t layer_norm(std::int64_t c) { return 2 * c; }  // gamma, beta
// a residual block with stride: conv 3x3/2, conv 3x3, GDN, conv 1x1/2 skip
std::int64_t residual_block_with_stride(std::int64_t in, std::int64_t out) {
  return conv(in, out, 3) + conv(out, out, 3) + gdn(out) + conv(in, out, 1);
}
// a residual block with sub-pixel upsampling: two conv 3x3 to 4 out (main
// and skip), conv 3x3, IGDN
std::int64_t residual_block_upsample(std::int64_t in, std::int64_t out) {
  return 2 * conv(in, 4 * out, 3) + conv(out, out, 3) + gdn(out);
}
// a Swin block of c channels: two LayerNorms, qkv (Linear(c, 3c)), proj, the MLP c -> 4c -> c
std::int64_t swin_block(std::int64_t c) {
  return 2 * layer_norm(c) + conv(c, 3 * c, 1) + conv(c, c, 1) + conv(c, 4 * c, 1) + conv(4 * c, c, 1);
}
// a mixed block of c channels: two conv 1x1, a residual block (two conv 3x3) and a Swin block on c / 2 each
std::int64_t conv_transformer_block(std::int64_t c) {
  return 2 * conv(c, c, 1) + 2 * conv(c / 2, c / 2, 3) + swin_block(c / 2);
}

TEST(TcmSmallModel, HasTheParameterCountOfItsBlocksAndTheContractsTensors) {
  const ModelSpec spec = tcm_small_spec();
  codec::check_contract(spec);
  Net net(spec, registry, {{"image", Shape{1, 3, 128, 192}}});
  const std::int64_t n = 128, m = 192;
  const std::int64_t g_a = residual_block_with_stride(3, n) + 2 * residual_block_with_stride(n, n) +
                           2 * conv_transformer_block(n) + conv(n, m, 3);
  const std::int64_t g_s = residual_block_upsample(m, n) + 2 * conv_transformer_block(n) +
                           2 * residual_block_upsample(n, n) + conv(n, 3 * 4, 3);  // the last sub-pixel convolution
  // mbt2018-mean's hyperprior (above), the factorized model 43 per channel of z
  const std::int64_t hyperprior =
      conv(m, n, 3) + 2 * conv(n, n, 5) + conv(n, m, 5) + conv(m, m * 3 / 2, 5) + conv(m * 3 / 2, 2 * m, 3) + 43 * n;
  EXPECT_EQ(swin_block(64), 49984);
  EXPECT_EQ(g_a + g_s + hyperprior, 10350636);
  EXPECT_EQ(net.parameter_count(), g_a + g_s + hyperprior);
  for (const char* blob : {"y", "y_hat", "scales", "means", "likelihoods"})
    EXPECT_EQ(net.blob(blob).shape(), (Shape{1, 192, 8, 12})) << blob;
  EXPECT_EQ(net.blob("z_likelihoods").shape(), (Shape{1, 128, 2, 3}));
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 128, 192}));
  // The attention runs at 1/8 of the image, 16x24: 2x3 windows of 8x8 = 64
  // tokens, 2 heads of 32 channels.
  for (const char* block : {"g_a3_0", "g_a3_1", "g_s1_0", "g_s1_1"}) {
    const std::string swin = std::string(block) + "_swin";
    EXPECT_EQ(net.blob(swin + "_q_w").shape(), (Shape{6, 2, 64, 32})) << block;
    EXPECT_EQ(net.blob(swin + "_weights").shape(), (Shape{6, 2, 64, 64})) << block;
    EXPECT_EQ(net.blob(swin + "_attended").shape(), (Shape{1, 64, 16, 24})) << block;
    EXPECT_EQ(net.layer(swin + "_norm1").type(), "LayerNorm");
    EXPECT_EQ(net.layer(swin + "_gelu").type(), "GELU");
  }
}

TEST(TcmSmallModel, ShiftsTheWindowsOfEveryOtherBlockAndScalesTheScores) {
  const ModelSpec spec = tcm_small_spec();
  std::map<std::string, int> shifts;
  int score_products = 0;
  for (const NodeSpec& node : spec.nodes) {
    if (node.type == "WindowPartition" || node.type == "WindowReverse") {
      EXPECT_EQ(node.params.at("window"), 8) << node.name;
      shifts[node.name] = node.params.value("shift", 0);
    }
    if (node.type == "MatMul" && node.params.value("transpose_b", false)) {
      ++score_products;
      EXPECT_DOUBLE_EQ(node.params.at("scale").get<double>(), 1 / std::sqrt(32.0)) << node.name;  // 1/sqrt(d)
    }
  }
  EXPECT_EQ(score_products, 4);
  ASSERT_EQ(shifts.size(), 4u * 4u);  // q, k, v partitions and the reverse of four blocks
  for (const auto& [name, shift] : shifts) {
    const bool second = name.find("_1_swin") != std::string::npos;
    EXPECT_EQ(shift, second ? 4 : 0) << name;
  }
}

TEST(TcmSmallModel, StrideIsSetByTheHyperLatent) { EXPECT_EQ(codec::derive_stride(tcm_small_spec(), registry), 64); }

TEST(TcmSmallModel, EveryParameterGetsAGradient) { expect_every_parameter_gets_a_gradient(tcm_small_spec()); }

ModelSpec elic_spec() { return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/elic.json"); }

// ELIC (He et al. 2022) as its paper describes it, N = 192, M = 320: a residual bottleneck of c channels is conv
// 1x1 c -> c/2, conv 3x3, conv 1x1 c/2 -> c (Cheng et al.'s residual unit the same); an attention module six
// residual units and a conv 1x1; group k of C_k channels (after P channels of groups before it): a spatial
// context 5x5 C_k -> 2 C_k, a channel context 5x5 P -> 224 -> 128 -> 2 C_k, and 1x1 convs of
// [2M hyper-parameters, spatial, channel] -> 640 -> 512 -> 2 C_k.
TEST(ElicModel, HasTheParameterCountOfItsBlocksAndGroups) {
  const ModelSpec spec = elic_spec();
  codec::check_contract(spec);
  Net net(spec, registry, {{"image", Shape{1, 3, 128, 192}}});
  const std::int64_t n = 192, m = 320;
  auto bottleneck = [](std::int64_t c) { return conv(c, c / 2, 1) + conv(c / 2, c / 2, 3) + conv(c / 2, c, 1); };
  auto attention = [&](std::int64_t c) { return 6 * bottleneck(c) + conv(c, c, 1); };
  const std::int64_t g_a =
      conv(3, n, 5) + 2 * conv(n, n, 5) + conv(n, m, 5) + 9 * bottleneck(n) + attention(n) + attention(m);
  const std::int64_t g_s =
      conv(m, n, 5) + 2 * conv(n, n, 5) + conv(n, 3, 5) + 9 * bottleneck(n) + attention(n) + attention(m);
  const std::int64_t hyperprior =
      conv(m, n, 3) + 2 * conv(n, n, 5) + conv(n, n, 5) + conv(n, n * 3 / 2, 5) + conv(n * 3 / 2, 2 * m, 3) + 43 * n;
  std::int64_t context = 0, before = 0;
  for (std::int64_t c : {16, 16, 32, 64, 192}) {
    context +=
        conv(c, 2 * c, 5) + conv(2 * m + (before > 0 ? 4 : 2) * c, 640, 1) + conv(640, 512, 1) + conv(512, 2 * c, 1);
    if (before > 0) context += conv(before, 224, 5) + conv(224, 128, 5) + conv(128, 2 * c, 5);
    before += c;
  }
  EXPECT_EQ(before, m);
  EXPECT_EQ(net.parameter_count(), g_a + g_s + hyperprior + context);
  EXPECT_EQ(net.blob("y").shape(), (Shape{1, 320, 8, 12}));
  EXPECT_EQ(net.blob("y_decoded").shape(), (Shape{1, 320, 8, 12}));
  EXPECT_EQ(net.blob("z").shape(), (Shape{1, 192, 2, 3}));
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 128, 192}));
  const std::vector<std::int64_t> groups{16, 16, 32, 64, 192};
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const std::string g = std::to_string(k);
    EXPECT_EQ(net.blob("y" + g).shape(), (Shape{1, groups[k], 8, 12})) << g;
    EXPECT_EQ(net.blob("group" + g + "_spatial_context").shape(), (Shape{1, 2 * groups[k], 8, 12})) << g;
    EXPECT_EQ(net.layer("group" + g + "_anchor_mask").type(), "CheckerboardMask") << g;
  }
  EXPECT_EQ(codec::derive_stride(spec, registry), 64);
}

// The spatial contexts learn through the rate of the other positions: each
// group's context mask output carries a gradient back.
TEST(ElicModel, EveryParameterGetsAGradient) {
  expect_every_parameter_gets_a_gradient(elic_spec(), "group4_spatial_context");
}

}  // namespace
}  // namespace plexus

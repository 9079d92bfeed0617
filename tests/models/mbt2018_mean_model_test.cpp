// The bundled mbt2018-mean spec (models/specs/): CompressAI's layer sizes
// (parameter count worked out by hand from its MeanScaleHyperprior), the
// tensor names the app's contract needs, a stride of 64, the means reaching
// the Gaussian conditional, rounding around the means in eval, and a gradient
// for every parameter.
#include <gtest/gtest.h>

#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/context.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

const Registry registry = builtin_registry();

ModelSpec mean_scale_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018-mean.json");
}

// Weights and biases of a k x k convolution (or transposed convolution) from
// `in` to `out` channels, and of a GDN over c channels (beta c, gamma c x c).
std::int64_t conv(std::int64_t in, std::int64_t out, std::int64_t k) { return in * out * k * k + out; }
std::int64_t gdn(std::int64_t c) { return c * c + c; }

TEST(MeanScaleHyperpriorModel, HasCompressAIsParameterCountAndTensorNames) {
  const ModelSpec spec = mean_scale_spec();
  ae::check_contract(spec);
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
  EXPECT_EQ(ae::derive_stride(mean_scale_spec(), registry), 64);
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

TEST(MeanScaleHyperpriorModel, EveryParameterGetsAGradient) {
  const Shape shape{1, 3, 64, 64};
  Net net(mean_scale_spec(), registry, {{"image", shape}}, DType::f32, Device::cpu(), 5);
  fill_image(net, shape);
  Context ctx(Device::cpu(), 7);
  ctx.set_training(true);
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"mse", ae::distortion_weight(0.01)}, {"bpp", 1.0}});
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
  // The means are learned through the rate (QuantizeAroundMean passes them
  // none): GaussianConditional's means input must carry a gradient back.
  const Tensor& means_grad = net.blob_grad("means");
  double largest = 0;
  for (double g : means_grad.to_values()) largest = std::max(largest, std::abs(g));
  EXPECT_GT(largest, 0.0);
}

}  // namespace
}  // namespace plexus

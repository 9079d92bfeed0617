// The bundled bmshj2018-hyperprior spec (models/specs/): CompressAI's
// layer sizes (parameter count worked out by hand from its ScaleHyperprior),
// the tensor names other code relies on, a stride of 64, and "bpp" = the bits
// of both latents, recomputed here from the likelihood blobs.
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

ModelSpec hyperprior_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-hyperprior.json");
}

TEST(HyperpriorModel, HasCompressAIsParameterCountAndTensorNames) {
  const ModelSpec spec = hyperprior_spec();
  ae::check_contract(spec);
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
  EXPECT_EQ(ae::derive_stride(hyperprior_spec(), registry), 64);
  const ModelSpec factorized =
      ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-factorized.json");
  EXPECT_EQ(ae::derive_stride(factorized, registry), 16);
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

}  // namespace
}  // namespace plexus

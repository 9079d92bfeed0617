// Net::set_inference_only: a net that holds only the blobs asked for, frees
// the others after their last reader and runs per-pixel layers in place,
// must compute exactly (bit for bit) what a net that keeps everything does,
// on the shipped autoencoder specs, across passes and reshapes; and it must
// refuse what it can no longer do. Large activations that a convolution
// reads for the last time are given back as it goes, with the same outputs.
#include <gtest/gtest.h>

#include <random>

#include "plexus/builtin_layers.h"
#include "plexus/host_memory.h"
#include "plexus/net.h"

namespace plexus {
namespace {

ModelSpec shipped_spec(const std::string& name) {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/" + name + ".json");
}

Tensor random_image(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = unit(rng);
  return Tensor::from_values(values, shape);
}

// Runs `whole` (keeps every blob) and `lean` (inference-only, keeping
// `kept`) on the same images, one shape after another, and expects every
// kept blob to be bit-identical.
void expect_same_outputs(const std::string& spec_name, const std::vector<std::string>& kept,
                         const std::vector<Shape>& image_shapes) {
  Registry registry = builtin_registry();
  Net whole(shipped_spec(spec_name), registry, {{"image", image_shapes[0]}}, DType::f32, Device::cpu(), 11);
  Net lean(shipped_spec(spec_name), registry, {{"image", image_shapes[0]}}, DType::f32, Device::cpu(), 11);
  lean.set_inference_only(kept);
  Context ctx;
  ctx.set_training(false);
  std::uint64_t seed = 1;
  for (const Shape& shape : image_shapes) {
    if (shape != whole.blob_shape("image")) {
      whole.reshape({{"image", shape}});
      lean.reshape({{"image", shape}});
    }
    for (int pass = 0; pass < 2; ++pass) {  // a second pass reuses what the first left
      const Tensor image = random_image(shape, seed++);
      whole.input("image").copy_from(image);
      lean.input("image").copy_from(image);
      whole.forward(ctx);
      lean.forward(ctx);
      for (const auto& name : kept)
        ASSERT_EQ(lean.blob(name).to_values(), whole.blob(name).to_values())
            << spec_name << " " << shape_str(shape) << " pass " << pass << ": blob '" << name << "'";
    }
  }
}

TEST(NetInferenceOnly, Bls2017SameOutputsAsWholeNet) {
  expect_same_outputs("bls2017", {"y_hat", "x_hat", "bpp"}, {{1, 3, 48, 64}, {1, 3, 80, 32}});
}

TEST(NetInferenceOnly, HyperpriorSameOutputsAsWholeNet) {
  expect_same_outputs("bmshj2018-hyperprior", {"y", "z_hat", "scales", "x_hat", "mse"},
                      {{1, 3, 64, 128}, {1, 3, 128, 64}});
}

TEST(NetInferenceOnly, MeanScaleSameOutputsAsWholeNet) {
  expect_same_outputs("mbt2018-mean", {"x_hat", "bpp"}, {{1, 3, 64, 64}});
}

// 512x512: the first activation, [1, 128, 256, 256], is a mapped buffer
// (host_memory.h), which the next convolution gives back as it reads it.
TEST(NetInferenceOnly, ConvolutionsGiveBackWhatTheyHaveRead) {
  const std::size_t before = host_memory::discarded_bytes();
  expect_same_outputs("bmshj2018-hyperprior", {"y", "x_hat"}, {{1, 3, 512, 512}});
  EXPECT_GE(host_memory::discarded_bytes() - before, std::size_t(16) << 20);
}

TEST(NetInferenceOnly, HoldsOnlyWhatItKeeps) {
  Registry registry = builtin_registry();
  Net net(shipped_spec("bls2017"), registry, {{"image", {1, 3, 32, 32}}});
  net.set_inference_only({"x_hat"});
  EXPECT_EQ(net.blob_shape("g_a0_out"), (Shape{1, 128, 8, 8}));
  EXPECT_THROW(net.blob("x_hat"), ConfigError);  // kept from the pass that computes it
  Context ctx;
  ctx.set_training(false);
  net.input("image").copy_from(random_image({1, 3, 32, 32}, 5));
  net.forward(ctx);
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 32, 32}));
  for (const char* freed : {"g_a0_out", "g_a0_norm", "y_hat", "image"})
    EXPECT_THROW(net.blob(freed), ConfigError) << freed;
  EXPECT_TRUE(net.has_blob("g_a0_out"));
  // The pass consumed its input: the next one needs it filled again.
  EXPECT_THROW(net.forward(ctx), ConfigError);
  net.input("image").copy_from(random_image({1, 3, 32, 32}, 6));
  net.forward(ctx);
  EXPECT_THROW(net.backward(ctx, {{"mse", 1.0}}), ConfigError);
  net.reshape({{"image", {1, 3, 16, 48}}});
  EXPECT_THROW(net.blob("x_hat"), ConfigError);
  net.input("image").copy_from(random_image({1, 3, 16, 48}, 7));
  net.forward(ctx);
  EXPECT_EQ(net.blob("x_hat").shape(), (Shape{1, 3, 16, 48}));
}

TEST(NetInferenceOnly, RefusesUnknownBlob) {
  Registry registry = builtin_registry();
  Net net(shipped_spec("bls2017"), registry, {{"image", {1, 3, 32, 32}}});
  try {
    net.set_inference_only({"x_hats"});
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'x_hat'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(net.inference_only());
}

}  // namespace
}  // namespace plexus

// Net::set_activation_storage(bf16): which blobs a net stores in bf16 (made
// by a layer that stores bf16 and read by exactly one such layer, never a
// model input), that forward and backward hand those tensors to the layers
// (values rounded to bf16 where stored, exact elsewhere), and what it
// refuses. A test layer stands in for the kernels that will store bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "plexus/bfloat16.h"
#include "plexus/builtin_layers.h"
#include "plexus/net.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

// y = a x (a: a scalar parameter, default 2), each tensor in its own dtype:
// a layer that stores bf16.
class Bf16Scale : public Layer {
 public:
  explicit Bf16Scale(LayerConfig& config) : initial_(config.number("initial", 2.0)) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (in.size() != 1) fail_shape("takes 1 input");
    return {in[0]};
  }
  void create_parameters(const std::vector<Shape>&) override { declare_parameter("a", {1}, init::constant(initial_)); }
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.stores_bf16 = true;
    return traits;
  }

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    const double a = parameter("a").value.to_values()[0];
    std::vector<double> x = in[0]->to_values();
    for (auto& v : x) v *= a;
    out[0]->copy_from(Tensor::from_values(x, out[0]->shape(), out[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors& in, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    const double a = parameter("a").value.to_values()[0];
    std::vector<double> x = in[0]->to_values(), dy = dout[0]->to_values();
    double da = parameter("a").grad.to_values()[0];
    for (std::size_t i = 0; i < x.size(); ++i) da += dy[i] * x[i];
    parameter("a").grad.copy_from(Tensor::from_values({da}, {1}, parameter("a").grad.dtype()));
    if (!din[0]) return;
    for (auto& v : dy) v *= a;
    din[0]->copy_from(Tensor::from_values(dy, din[0]->shape(), din[0]->dtype()));
  }

 private:
  double initial_;
};

Registry registry_with_bf16_scale() {
  Registry registry = builtin_registry();
  registry.add("Bf16Scale", [](LayerConfig& c) { return std::make_unique<Bf16Scale>(c); });
  return registry;
}

const Shape kShape{4, 16};

// x -> s1 -> a -> s2 -> b -> relu -> c -> MSE(c, target): only `a` is made
// and read by layers that store bf16.
ModelSpec chain() {
  ModelSpec spec;
  spec.name = "chain";
  spec.add_input("x")
      .add_input("target")
      .add_node({"s1", "Bf16Scale", {"x"}, {"a"}, {}})
      .add_node({"s2", "Bf16Scale", {"a"}, {"b"}, {}})
      .add_node({"relu", "ReLU", {"b"}, {"c"}, {}})
      .add_node({"mse", "MSELoss", {"c", "target"}, {"loss"}, {}});
  return spec;
}

// Positive values whose doubles are not bf16 values (so rounding shows).
std::vector<double> inputs(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.1f, 3.0f);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(kShape)));
  for (auto& v : values) v = dist(rng);
  return values;
}

double bf16_rounded(double value) { return f32_from_bf16_bits(bf16_bits_from_f32(static_cast<float>(value))); }

void run(Net& net) {
  net.input("x").copy_from(Tensor::from_values(inputs(1), kShape));
  net.input("target").copy_from(Tensor::from_values(inputs(2), kShape));
  Context ctx;
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"loss", 1.0}});
}

TEST(NetBf16Storage, StoresInBf16OnlyBlobsMadeAndReadOnceByLayersThatStoreIt) {
  const Registry registry = registry_with_bf16_scale();
  Net net(chain(), registry, {{"x", kShape}, {"target", kShape}});
  EXPECT_EQ(net.activation_storage(), DType::f32);
  for (const char* blob : {"x", "a", "b", "c", "loss"}) EXPECT_EQ(net.blob_dtype(blob), DType::f32) << blob;
  EXPECT_EQ(net.bf16_blob_count(), 0u);
  const auto version = net.layout_version();
  net.set_activation_storage(DType::bf16);
  EXPECT_NE(net.layout_version(), version);  // the blobs were allocated again
  EXPECT_EQ(net.blob_dtype("a"), DType::bf16);
  for (const char* blob : {"x", "target", "b", "c", "loss"}) EXPECT_EQ(net.blob_dtype(blob), DType::f32) << blob;
  EXPECT_EQ(net.blob("a").dtype(), DType::bf16);
  EXPECT_EQ(net.bf16_blob_count(), 1u);
  EXPECT_EQ(net.blob_count(), 6u);  // x, target, a, b, c, loss
  EXPECT_THROW(net.blob_dtype("nothing"), ConfigError);
}

TEST(NetBf16Storage, ForwardAndBackwardRoundOnlyWhereABlobIsStoredInBf16) {
  const Registry registry = registry_with_bf16_scale();
  Net net(chain(), registry, {{"x", kShape}, {"target", kShape}});
  net.set_activation_storage(DType::bf16);
  run(net);
  const std::vector<double> x = inputs(1), a = net.blob("a").to_values(), b = net.blob("b").to_values();
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(a[i], bf16_rounded(2.0 * static_cast<float>(x[i]))) << i;
    ASSERT_EQ(b[i], 2.0 * a[i]) << i;  // f32, exact
  }
  EXPECT_EQ(net.blob_grad("a").dtype(), DType::bf16);
  EXPECT_EQ(net.blob_grad("b").dtype(), DType::f32);
  const std::vector<double> grad_a = net.blob_grad("a").to_values(), grad_b = net.blob_grad("b").to_values();
  double nonzero = 0;
  for (std::size_t i = 0; i < grad_a.size(); ++i) {
    ASSERT_EQ(grad_a[i], bf16_rounded(2.0 * grad_b[i])) << i;
    nonzero += grad_a[i] != 0.0;
  }
  EXPECT_GT(nonzero, 0) << "the gradients are all zero: the test compares nothing";
  // s2's parameter gradient, sum dL/db * a, reads the bf16 values of a; f32.
  double expected = 0;
  for (std::size_t i = 0; i < a.size(); ++i) expected += grad_b[i] * a[i];
  EXPECT_EQ(net.layer("s2").parameter("a").grad.dtype(), DType::f32);
  EXPECT_NEAR(net.layer("s2").parameter("a").grad.to_values()[0], expected, 1e-5 * std::abs(expected));

  // The same net stored in f32 computes without rounding.
  net.set_activation_storage(DType::f32);
  run(net);
  const std::vector<double> b32 = net.blob("b").to_values();
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b32[i], 4.0 * static_cast<float>(x[i])) << i;
}

TEST(NetBf16Storage, ABlobReadBySeveralNodesStaysF32) {
  ModelSpec spec;
  spec.name = "fan-out";
  spec.add_input("x")
      .add_node({"s1", "Bf16Scale", {"x"}, {"a"}, {}})
      .add_node({"s2", "Bf16Scale", {"a"}, {"b"}, {}})
      .add_node({"s3", "Bf16Scale", {"a"}, {"c"}, {}})
      .add_node({"s4", "Bf16Scale", {"b"}, {"d"}, {}});
  const Registry registry = registry_with_bf16_scale();
  Net net(spec, registry, {{"x", kShape}});
  net.set_activation_storage(DType::bf16);
  EXPECT_EQ(net.blob_dtype("a"), DType::f32);   // read by s2 and s3: their gradients are summed in f32
  EXPECT_EQ(net.blob_dtype("b"), DType::bf16);  // s2 -> s4
  EXPECT_EQ(net.blob_dtype("c"), DType::f32);   // read by nobody
  EXPECT_EQ(net.blob_dtype("d"), DType::f32);
}

TEST(NetBf16Storage, RefusesWhatItCannotStore) {
  const Registry registry = registry_with_bf16_scale();
  Net f64(chain(), registry, {{"x", kShape}, {"target", kShape}}, DType::f64);
  try {
    f64.set_activation_storage(DType::bf16);
    FAIL() << "bf16 storage in an f64 net";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
  }
  Net f32(chain(), registry, {{"x", kShape}, {"target", kShape}});
  EXPECT_THROW(f32.set_activation_storage(DType::f64), ConfigError);
  EXPECT_EQ(f32.activation_storage(), DType::f32);
}

// Layer::forward and backward take bf16 tensors only into a layer that
// accepts them and has f32 parameters (the master weights of bf16 storage):
// with f64 parameters a bf16 tensor is refused, naming the node, the tensor
// and the parameters' dtype; with f32 parameters it passes.
TEST(NetBf16Storage, Bf16TensorsNeedF32Parameters) {
  const Registry registry = registry_with_bf16_scale();
  const Shape shape{2, 3};
  for (const DType parameters : {DType::f64, DType::f32}) {
    auto layer = registry.create("Bf16Scale", "s", {});
    layer->output_shapes({shape});
    layer->create_parameters({shape});
    std::mt19937_64 rng(0);
    layer->initialize_parameters(parameters, Device::cpu(), rng);
    Context ctx;
    const Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6}, shape, DType::bf16);
    Tensor y(shape, DType::bf16);
    if (parameters == DType::f32) {
      EXPECT_NO_THROW(layer->forward(ctx, {&x}, {&y}));
      continue;
    }
    try {
      layer->forward(ctx, {&x}, {&y});
      FAIL() << "bf16 tensors were accepted with f64 parameters";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("node 's' (Bf16Scale)"), std::string::npos) << message;
      EXPECT_NE(message.find("input 0 is bf16"), std::string::npos) << message;
      EXPECT_NE(message.find("f64 parameters"), std::string::npos) << message;
    }
  }
}

// A small analysis/synthesis pair as the bundled codecs build them, on CUDA:
// x -> conv -> GDN -> conv -> IGDN -> conv^T -> conv^T -> MSE(., x). With
// bf16 storage every blob between the first and the last convolution is
// bf16 (made and read once by layers that store bf16, the few-channel
// convolutions next to the image included); the image and the
// reconstruction (a loss's operand) stay f32; one forward
// and backward then gives the loss and every parameter gradient of the f32
// net within the rounding of those blobs (8 significant bits: 1e-2
// relative), and not bit for bit the same (so the storage did change).
ModelSpec small_codec() {
  ModelSpec spec;
  spec.name = "small-codec";
  spec.add_input("x")
      .add_node({"a0", "Conv2d", {"x"}, {"h0"}, {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"gdn", "GDN", {"h0"}, {"h1"}, {}})
      .add_node({"a1", "Conv2d", {"h1"}, {"y"}, {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"igdn", "IGDN", {"y"}, {"h2"}, {}})
      .add_node({"s0",
                 "ConvTranspose2d",
                 {"h2"},
                 {"h3"},
                 {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"s1",
                 "ConvTranspose2d",
                 {"h3"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"mse", "MSELoss", {"x_hat", "x"}, {"loss"}, {}});
  return spec;
}

struct CodecStep {
  double loss;
  std::vector<std::vector<double>> gradients;
};

CodecStep codec_step(DType storage) {
  const Registry registry = builtin_registry();
  const Shape image{2, 3, 32, 32};
  Net net(small_codec(), registry, {{"x", image}}, DType::f32, Device::cuda(), 7);
  net.set_activation_storage(storage);
  for (const char* blob : {"h0", "h1", "y", "h2", "h3"}) EXPECT_EQ(net.blob_dtype(blob), storage) << blob;
  for (const char* blob : {"x", "x_hat", "loss"}) EXPECT_EQ(net.blob_dtype(blob), DType::f32) << blob;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> pixel(0.0, 1.0);
  std::vector<double> x(static_cast<std::size_t>(shape_numel(image)));
  for (double& v : x) v = pixel(rng);
  net.input("x").copy_from(Tensor::from_values(x, image, DType::f32, Device::cuda()));
  Context ctx(Device::cuda());
  ctx.set_precision(Precision::bf16);
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"loss", 1.0}});
  CodecStep step{net.blob("loss").to_values()[0], {}};
  for (const NamedParameter& p : net.trainable_parameters()) step.gradients.push_back(p.parameter->grad.to_values());
  return step;
}

TEST(NetBf16Storage, ConvolutionsAndGdnTrainOnBf16BlobsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const CodecStep f32 = codec_step(DType::f32), bf16 = codec_step(DType::bf16);
  EXPECT_NEAR(bf16.loss, f32.loss, 1e-2 * f32.loss);
  ASSERT_EQ(f32.gradients.size(), bf16.gradients.size());
  bool any_difference = false;
  for (std::size_t p = 0; p < f32.gradients.size(); ++p) {
    double difference = 0, norm = 0;
    for (std::size_t i = 0; i < f32.gradients[p].size(); ++i) {
      const double d = bf16.gradients[p][i] - f32.gradients[p][i];
      difference += d * d;
      norm += f32.gradients[p][i] * f32.gradients[p][i];
      any_difference = any_difference || d != 0.0;
    }
    ASSERT_GT(norm, 0.0) << "parameter " << p << " has no gradient: the test compares nothing";
    EXPECT_LE(std::sqrt(difference / norm), 2e-2) << "parameter " << p;
  }
  EXPECT_TRUE(any_difference) << "bf16 storage changed no gradient: were the blobs stored in bf16?";
}

// What the trainer stores activations in: bf16 only for bf16 precision on CUDA.
TEST(NetBf16Storage, StorageFollowsPrecisionAndDevice) {
  EXPECT_EQ(activation_storage_for(Precision::bf16, Device::cuda()), DType::bf16);
  for (const Precision precision : {Precision::f32, Precision::tf32})
    EXPECT_EQ(activation_storage_for(precision, Device::cuda()), DType::f32) << precision_name(precision);
  for (const Precision precision : {Precision::f32, Precision::tf32, Precision::bf16})
    EXPECT_EQ(activation_storage_for(precision, Device::cpu()), DType::f32) << precision_name(precision);
}

}  // namespace
}  // namespace plexus

// Net: topological order, fan-out gradient accumulation, shape inference
// errors, cycles, missing inputs, reshape, seeded initialisation.
#include <gtest/gtest.h>

#include "framework/test_layers.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using nlohmann::json;

using testing::expect_error;

// x -> s1 = a1*x -> s2 = a2*s1 ; add = s1 + s2 ; loss = sum(add).
// s1 feeds two nodes, so its gradient must be the sum of both paths.
ModelSpec fan_out_spec() {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"loss", "TestSum", {"add"}, {"loss"}, json::object()})  // listed first on purpose
      .add_node({"s1", "TestScale", {"x"}, {"s1"}, {{"initial", 2.0}}})
      .add_node({"add", "TestAdd", {"s1", "s2"}, {"add"}, json::object()})
      .add_node({"s2", "TestScale", {"s1"}, {"s2"}, {{"initial", 3.0}}});
  return spec;
}

TEST(Net, SortsNodesTopologically) {
  Net net(fan_out_spec(), test::test_registry(), {{"x", {4}}});
  EXPECT_EQ(net.execution_order(), (std::vector<std::string>{"s1", "s2", "add", "loss"}));
}

TEST(Net, ForwardAndBackwardAccumulateFanOut) {
  Net net(fan_out_spec(), test::test_registry(), {{"x", {4}}}, DType::f64);
  Context ctx;
  net.input("x").copy_from(Tensor::from_values({1.0, -2.0, 0.5, 4.0}, {4}, DType::f64));
  net.forward(ctx);
  // loss = sum(a1 x + a2 a1 x) = a1 (1 + a2) sum(x) = 2 * 4 * 3.5 = 28
  EXPECT_DOUBLE_EQ(net.scalar("loss"), 28.0);
  net.zero_grad();
  net.backward(ctx, {{"loss", 1.0}});
  // dL/da1 = (1 + a2) sum(x) = 14;  dL/da2 = a1 sum(x) = 7
  EXPECT_DOUBLE_EQ(net.layer("s1").parameter("a").grad.to_values()[0], 14.0);
  EXPECT_DOUBLE_EQ(net.layer("s2").parameter("a").grad.to_values()[0], 7.0);
  // dL/ds1 = 1 (direct) + a2 (through s2) = 4 for every element
  EXPECT_EQ(net.blob_grad("s1").to_values(), (std::vector<double>{4.0, 4.0, 4.0, 4.0}));
  // A loss weight scales every gradient.
  net.zero_grad();
  net.backward(ctx, {{"loss", 0.5}});
  EXPECT_DOUBLE_EQ(net.layer("s1").parameter("a").grad.to_values()[0], 7.0);
}

TEST(Net, ParameterNamesAndCount) {
  Net net(fan_out_spec(), test::test_registry(), {{"x", {4}}});
  auto parameters = net.parameters();
  ASSERT_EQ(parameters.size(), 2u);
  EXPECT_EQ(parameters[0].name, "s1.a");
  EXPECT_EQ(parameters[1].name, "s2.a");
  EXPECT_EQ(net.parameter_count(), 2);
}

TEST(Net, BuffersAreListedButNeitherTrainedNorCounted) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"b", "TestBufferedScale", {"x"}, {"y"}, json::object()})
      .add_node({"loss", "TestSum", {"y"}, {"loss"}, json::object()});
  Net net(spec, test::test_registry(), {{"x", {3}}}, DType::f64);
  auto all = net.parameters();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "b.a");
  EXPECT_EQ(all[1].name, "b.s");
  EXPECT_FALSE(all[1].parameter->trainable);
  auto trainable = net.trainable_parameters();
  ASSERT_EQ(trainable.size(), 1u);
  EXPECT_EQ(trainable[0].name, "b.a");
  EXPECT_EQ(net.parameter_count(), 1);

  // Adam given every parameter, the buffer with a gradient, leaves the buffer alone.
  Context ctx;
  net.input("x").copy_from(Tensor::from_values({1, 2, 3}, {3}, DType::f64));
  net.zero_grad();
  net.forward(ctx);
  net.backward(ctx, {{"loss", 1.0}});
  all[1].parameter->grad.copy_from(Tensor::from_values({5.0}, {1}, DType::f64));
  Adam adam(0.5);
  adam.step(ctx, all);
  EXPECT_NEAR(all[0].parameter->value.to_values()[0], 1.5, 1e-9);  // first Adam step: a - lr sign(g)
  EXPECT_EQ(all[1].parameter->value.to_values()[0], 3.0);
  for (const auto& [name, tensor] : adam.state()) EXPECT_EQ(name.find("b.s"), std::string::npos) << name;

  // after_update reaches the layer with the count, and its constraint holds.
  net.after_update(ctx, 7);
  auto& layer = dynamic_cast<test::BufferedScaleLayer&>(net.layer("b"));
  EXPECT_EQ(layer.last_update, 7);
  EXPECT_EQ(all[0].parameter->value.to_values()[0], 1.0);
  Sgd sgd(0.1);
  sgd.step(ctx, all);
  EXPECT_EQ(all[1].parameter->value.to_values()[0], 3.0);
  EXPECT_NE(all[0].parameter->value.to_values()[0], 1.0);
}

TEST(Net, ShapeErrorNamesNodeAndShapes) {
  ModelSpec spec;
  spec.add_input("x").add_input("y").add_node({"join", "TestAdd", {"x", "y"}, {"z"}, json::object()});
  expect_error<ShapeError>(
      [&] {
        Net(spec, test::test_registry(), {{"x", {2, 3}}, {"y", {2, 4}}});
      },
      {"node 'join' (TestAdd)", "[2, 3]", "[2, 4]"});
}

TEST(Net, CycleIsReported) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"a", "TestAdd", {"x", "b_out"}, {"a_out"}, json::object()})
      .add_node({"b", "ReLU", {"a_out"}, {"b_out"}, json::object()});
  expect_error<ConfigError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); }, {"cycle", "'a'", "'b'"});
}

TEST(Net, MissingInputIsReportedWithSuggestion) {
  ModelSpec spec;
  spec.add_input("image").add_node({"r", "ReLU", {"imag"}, {"out"}, json::object()});
  expect_error<ConfigError>(
      [&] {
        Net(spec, test::test_registry(), {{"image", {2}}});
      },
      {"node 'r' reads 'imag'", "did you mean 'image'"});
}

TEST(Net, BlobProducedTwiceIsReported) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"r1", "ReLU", {"x"}, {"h"}, json::object()})
      .add_node({"r2", "ReLU", {"x"}, {"h"}, json::object()});
  expect_error<ConfigError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); }, {"blob 'h'", "'r2'", "'r1'"});
}

TEST(Net, DuplicateNodeNameIsReported) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"r", "ReLU", {"x"}, {"h1"}, json::object()})
      .add_node({"r", "ReLU", {"x"}, {"h2"}, json::object()});
  expect_error<ConfigError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); }, {"two nodes are named 'r'"});
}

TEST(Net, MissingInputShapeIsReported) {
  expect_error<ShapeError>([&] { Net(fan_out_spec(), test::test_registry(), {}); },
                           {"no shape given for model input 'x'"});
}

TEST(Net, UnknownLayerParameterIsReported) {
  ModelSpec spec;
  spec.add_input("x").add_node({"s", "TestScale", {"x"}, {"y"}, {{"intial", 1.0}}});
  expect_error<ConfigError>(
      [&] {
        Net(spec, test::test_registry(), {{"x", {2}}});
      },
      {"node 's' (TestScale)", "unknown parameter 'intial'", "takes: initial"});
}

TEST(Net, ReshapeKeepsParameters) {
  Net net(fan_out_spec(), test::test_registry(), {{"x", {4}}}, DType::f64);
  net.layer("s1").parameter("a").value.copy_from(Tensor::from_values({5.0}, {1}, DType::f64));
  net.reshape({{"x", {2, 3}}});
  EXPECT_EQ(net.blob("add").shape(), (Shape{2, 3}));
  EXPECT_EQ(net.layer("s1").parameter("a").value.to_values()[0], 5.0);
}

// A layer whose only parameter is drawn at random.
class RandomWeights : public test::ScaleLayer {
 public:
  using test::ScaleLayer::ScaleLayer;
  void create_parameters(const std::vector<Shape>&) override { declare_parameter("w", {16}, init::uniform(-1, 1)); }
};

TEST(Net, SeededInitialisationIsReproducible) {
  Registry registry = test::test_registry();
  registry.add("RandomWeights", [](LayerConfig& c) { return std::make_unique<RandomWeights>(c); });
  ModelSpec spec;
  spec.add_input("x").add_node({"u", "RandomWeights", {"x"}, {"y"}, json::object()});
  auto weights = [&](std::uint64_t seed) {
    Net net(spec, registry, {{"x", {3}}}, DType::f64, Device::cpu(), seed);
    return net.layer("u").parameter("w").value.to_values();
  };
  EXPECT_EQ(weights(7), weights(7));
  EXPECT_NE(weights(7), weights(8));
}

TEST(Net, ANetForLoadingHasZeroParametersAndNoGradients) {
  ModelSpec spec;
  spec.add_input("x").add_node({"s", "TestScale", {"x"}, {"y"}, {{"initial", 5.0}}});
  Net net(spec, test::test_registry(), {{"x", {3}}}, DType::f64, Device::cpu(), 0, InitialParameters::for_loading);
  Parameter& a = net.layer("s").parameter("a");
  EXPECT_EQ(a.value.to_values(), std::vector<double>{0.0});  // not drawn from its initializer (5)
  EXPECT_FALSE(a.grad.defined());
  // Weights copied in run forward; backward is refused with a reason, not a crash.
  a.value.copy_from(Tensor::from_values({3.0}, {1}, DType::f64));
  Context ctx;
  net.input("x").copy_from(Tensor::from_values({1.0, -2.0, 4.0}, {3}, DType::f64));
  net.forward(ctx);
  EXPECT_EQ(net.blob("y").to_values(), (std::vector<double>{3.0, -6.0, 12.0}));
  net.zero_grad();
  expect_error<ConfigError>([&] { net.backward(ctx, {{"y", 1.0}}); }, {"no gradients"});
}

TEST(Net, AShapesOnlyNetAllocatesNoParameterOrBlob) {
  ModelSpec spec;
  spec.add_input("x").add_node({"s", "TestScale", {"x"}, {"y"}, {{"initial", 5.0}}});
  Net net(spec, test::test_registry(), {{"x", {3, 7}}}, DType::f32, Device::cpu(), 0, InitialParameters::shapes_only);
  // The parameters are declared, with their shapes, but hold no memory.
  ASSERT_EQ(net.parameters().size(), 1u);
  Parameter& a = net.layer("s").parameter("a");
  EXPECT_EQ(a.shape, Shape{1});
  EXPECT_FALSE(a.value.defined());
  EXPECT_FALSE(a.grad.defined());
  EXPECT_EQ(net.blob_shape("x"), (Shape{3, 7}));
  EXPECT_EQ(net.blob_shape("y"), (Shape{3, 7}));
  net.reshape({{"x", {2, 5}}});
  EXPECT_EQ(net.blob_shape("y"), (Shape{2, 5}));
  EXPECT_FALSE(a.value.defined());
  // Nothing to compute with: a clear error, not a crash.
  expect_error<ConfigError>([&] { net.blob("y"); }, {"'y'", "shapes only"});
  Context ctx;
  expect_error<ConfigError>([&] { net.forward(ctx); }, {"shapes only"});
}

TEST(Net, AskingForAMissingGpuIsAClearError) {
  // One device past those visible: fails the same way with or without a GPU.
  int missing = cuda_available() ? 64 : 0;
  expect_error<DeviceError>(
      [&] {
        Net(fan_out_spec(), test::test_registry(), {{"x", {4}}}, DType::f32, Device::cuda(missing));
      },
      {"cuda:" + std::to_string(missing)});
  expect_error<DeviceError>([&] { parse_device("cuda:" + std::to_string(missing)); }, {"cuda"});
  EXPECT_EQ(parse_device("auto").is_cuda(), cuda_available());
}

}  // namespace
}  // namespace plexus

// What a model author is told about a wrong graph: the node whose shape
// inference failed (with its inputs and the net's input sizes), the nodes of
// a cycle in cycle order, and outputs of a multi-output node that nothing reads.
#include <gtest/gtest.h>

#include <stdexcept>

#include "data/data_test_support.h"
#include "plexus/testing/gtest_helpers.h"
#include "framework/test_layers.h"
#include "plexus/net.h"

namespace plexus {
namespace {

using nlohmann::json;
using testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// image -> c1 (Conv2d, k5 s4) -> h -> c2 (Conv2d, k5) -> g -> loss (TestSum).
ModelSpec two_convolutions() {
  return ModelSpec::from_json(json::parse(R"({
    "inputs": ["image"],
    "nodes": [
      {"name": "c1", "type": "Conv2d", "inputs": ["image"], "outputs": ["h"],
       "params": {"out_channels": 8, "kernel": 5, "stride": 4}},
      {"name": "c2", "type": "Conv2d", "inputs": ["h"], "outputs": ["g"],
       "params": {"out_channels": 8, "kernel": 5}},
      {"name": "loss", "type": "TestSum", "inputs": ["g"], "outputs": ["loss"]}
    ]})"),
                              "tiny.json");
}

TEST(NetShapeErrors, NameTheFailingNodeItsInputsAndTheNetInputSizes) {
  // c1 turns 8x8 into 1x1, too small for c2's 5x5 kernel: c2 is at fault, not the loss after it.
  const std::string message = error_of<ShapeError>([] {
    Net(two_convolutions(), test::test_registry(), {{"image", {1, 3, 8, 8}}});
  });
  EXPECT_TRUE(contains(message, "tiny.json: node 'c2' (Conv2d): input [1, 8, 1, 1]")) << message;
  EXPECT_TRUE(contains(message, "its inputs: 'h' [1, 8, 1, 1] (from node 'c1' (Conv2d))")) << message;
  EXPECT_TRUE(contains(message, "while building for image [1, 3, 8, 8]")) << message;
  EXPECT_FALSE(contains(message, "'loss'")) << message;
  EXPECT_EQ(message.find("node 'c2'"), message.rfind("node 'c2'")) << "the node is named twice: " << message;
}

TEST(NetShapeErrors, AddOfTwoShapesNamesTheAddAndWhereEachInputComesFrom) {
  ModelSpec spec;
  spec.add_input("image")
      .add_node({"ca", "Conv2d", {"image"}, {"a"}, {{"out_channels", 4}, {"kernel", 1}}})
      .add_node({"cb", "Conv2d", {"image"}, {"b"}, {{"out_channels", 6}, {"kernel", 1}}})
      .add_node({"join", "Add", {"a", "b"}, {"s"}, json::object()})
      .add_node({"loss", "TestSum", {"s"}, {"loss"}, json::object()});
  const std::string message = error_of<ShapeError>([&] {
    Net(spec, test::test_registry(), {{"image", {1, 3, 8, 8}}});
  });
  EXPECT_TRUE(contains(message, "node 'join' (Add): input 1 is [1, 6, 8, 8] but input 0 is [1, 4, 8, 8]")) << message;
  EXPECT_TRUE(
      contains(message, "'a' [1, 4, 8, 8] (from node 'ca' (Conv2d)), 'b' [1, 6, 8, 8] (from node 'cb' (Conv2d))"))
      << message;
  EXPECT_TRUE(contains(message, "while building for image [1, 3, 8, 8]")) << message;
}

TEST(NetShapeErrors, ReshapeSaysWhichSizesItWasReshapingFor) {
  Net net(two_convolutions(), test::test_registry(), {{"image", {1, 3, 32, 32}}});
  // The weights were made for 3 channels.
  const std::string message = error_of<ShapeError>([&] { net.reshape({{"image", {1, 1, 32, 32}}}); });
  EXPECT_TRUE(contains(message, "node 'c1' (Conv2d): input [1, 1, 32, 32] has 1 channels")) << message;
  EXPECT_TRUE(contains(message, "'image' [1, 1, 32, 32] (a model input)")) << message;
  EXPECT_TRUE(contains(message, "while reshaping for image [1, 1, 32, 32]")) << message;
}

TEST(NetShapeErrors, WrongNumberOfOutputsSaysTheNetInputSizes) {
  ModelSpec spec;
  spec.add_input("x").add_node({"r", "ReLU", {"x"}, {"y", "z"}, json::object()});
  const std::string message = error_of<ShapeError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); });
  EXPECT_TRUE(contains(message, "node 'r' (ReLU) produces 1 output(s) but the spec names 2")) << message;
  EXPECT_TRUE(contains(message, "while building for x [2]")) << message;
}

// A layer with a bug: its shape inference throws something that is not a plexus::Error.
class IndexesPastTheEnd : public test::ScaleLayer {
 public:
  using test::ScaleLayer::ScaleLayer;
  std::vector<Shape> output_shapes(const std::vector<Shape>&) const override {
    throw std::out_of_range("vector::_M_range_check");
  }
};

TEST(NetShapeErrors, ALayerBugStillNamesTheNode) {
  Registry registry = test::test_registry();
  registry.add("IndexesPastTheEnd", [](LayerConfig& c) { return std::make_unique<IndexesPastTheEnd>(c); });
  ModelSpec spec;
  spec.add_input("x").add_node({"buggy", "IndexesPastTheEnd", {"x"}, {"y"}, json::object()});
  const std::string message = error_of<Error>([&] { Net(spec, registry, {{"x", {3}}}); });
  EXPECT_TRUE(contains(message, "node 'buggy' (IndexesPastTheEnd): vector::_M_range_check")) << message;
  EXPECT_TRUE(contains(message, "while building for x [3]")) << message;
}

TEST(NetCycles, ListOnlyTheNodesOnTheCycleInDataFlowOrder) {
  // p -> q -> r -> p, listed out of order; 'after' waits on the cycle but is not on it.
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"after", "ReLU", {"q_out"}, {"after_out"}, json::object()})
      .add_node({"p", "ReLU", {"r_out"}, {"p_out"}, json::object()})
      .add_node({"r", "ReLU", {"q_out"}, {"r_out"}, json::object()})
      .add_node({"q", "TestAdd", {"x", "p_out"}, {"q_out"}, json::object()});
  const std::string message = error_of<ConfigError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); });
  EXPECT_TRUE(contains(message, "the graph has a cycle: 'p' -> 'q' -> 'r' -> 'p' (through blobs 'p_out', 'q_out', "
                                "'r_out')"))
      << message;
  EXPECT_FALSE(contains(message, "'after'")) << message;
}

TEST(NetCycles, ANodeReadingItsOwnOutputIsACycleOfOne) {
  ModelSpec spec;
  spec.add_input("x")
      .add_node({"loop", "TestAdd", {"x", "y"}, {"y"}, json::object()})
      .add_node({"next", "ReLU", {"y"}, {"z"}, json::object()});
  const std::string message = error_of<ConfigError>([&] { Net(spec, test::test_registry(), {{"x", {2}}}); });
  EXPECT_TRUE(contains(message, "cycle: 'loop' -> 'loop' (through blobs 'y')")) << message;
  EXPECT_FALSE(contains(message, "'next'")) << message;
}

// x -> split (sizes 2, 2) -> low, high -> loss; with `read_high` false only low reaches the loss.
ModelSpec split_spec(bool read_high) {
  ModelSpec spec;
  spec.add_input("x").add_node({"split", "Split", {"x"}, {"low", "high"}, {{"sizes", {2, 2}}}});
  if (read_high)
    spec.add_node({"join", "Add", {"low", "high"}, {"both"}, json::object()})
        .add_node({"loss", "TestSum", {"both"}, {"loss"}, json::object()});
  else spec.add_node({"loss", "TestSum", {"low"}, {"loss"}, json::object()});
  return spec;
}

TEST(NetUnreadOutputs, AnUnreadOutputBesideReadOnesIsWarnedOnceAtConstruction) {
  testing::LogCapture log;
  {
    Net net(split_spec(false), test::test_registry(), {{"x", {1, 4, 2, 2}}});
    net.reshape({{"x", {2, 4, 2, 2}}});
  }
  const std::string text = log.text();
  const std::string warning = "node 'split' (Split) writes 'high', which no node reads";
  EXPECT_TRUE(contains(text, warning)) << text;
  EXPECT_EQ(text.find(warning), text.rfind(warning)) << "warned more than once: " << text;
  EXPECT_TRUE(contains(text, "warn")) << text;
}

TEST(NetUnreadOutputs, FinalOutputsAndFullyReadNodesAreNotWarned) {
  testing::LogCapture log;
  // 'loss' is read by nothing but is a single-output node: a final output.
  Net read(split_spec(true), test::test_registry(), {{"x", {1, 4, 2, 2}}});
  // Neither output of 'split' is read: the caller reads both from the net.
  ModelSpec outputs_only;
  outputs_only.add_input("x").add_node({"split", "Split", {"x"}, {"low", "high"}, {{"sizes", {2, 2}}}});
  Net unread(outputs_only, test::test_registry(), {{"x", {1, 4, 2, 2}}});
  EXPECT_EQ(log.text(), "");
}

}  // namespace
}  // namespace plexus

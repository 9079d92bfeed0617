// ModelSpec parsing: good files, malformed JSON with its position, and every
// structural mistake named.
#include <gtest/gtest.h>

#include "plexus/testing/gtest_helpers.h"

#include <fstream>

#include "plexus/error.h"
#include "plexus/model_spec.h"

namespace plexus {
namespace {

using testing::error_of;

TEST(ModelSpec, ParsesNodesAndParams) {
  ModelSpec spec = ModelSpec::from_text(R"({
    "name": "tiny", "inputs": ["x"],
    "nodes": [{"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["y"], "params": {"k": 3}}]
  })");
  EXPECT_EQ(spec.name, "tiny");
  ASSERT_EQ(spec.nodes.size(), 1u);
  EXPECT_EQ(spec.nodes[0].type, "ReLU");
  EXPECT_EQ(spec.nodes[0].params["k"], 3);
  // Round trip through to_json.
  ModelSpec again = ModelSpec::from_json(spec.to_json());
  EXPECT_EQ(again.to_json(), spec.to_json());
}

TEST(ModelSpec, MalformedJsonNamesFileLineAndColumn) {
  std::string message = error_of<ConfigError>(
      [] { ModelSpec::from_text("{\n  \"inputs\": [\"x\"],\n  \"nodes\": [,]\n}", "model.json"); });
  EXPECT_NE(message.find("model.json:3:"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

TEST(ModelSpec, MissingFileIsIoError) {
  std::string message = error_of<IoError>([] { ModelSpec::from_file("/nonexistent/model.json"); });
  EXPECT_NE(message.find("/nonexistent/model.json"), std::string::npos) << message;
}

TEST(ModelSpec, StructuralMistakesAreNamed) {
  EXPECT_NE(
      error_of<ConfigError>([] { ModelSpec::from_text(R"({"nodes": []})", "m.json"); }).find("missing \"inputs\""),
      std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] {
              ModelSpec::from_text(R"({"inputs": ["x"], "nodes": [{"name": "a", "type": "ReLU", "inputs": ["x"]}]})",
                                   "m.json");
            }).find("nodes[0] ('a'): missing \"outputs\""),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] {
              ModelSpec::from_text(R"({"inputs": ["x"], "nodes": [{"name": "a", "typ": "ReLU", "outputs": ["y"]}]})",
                                   "m.json");
            }).find("unknown key 'typ'"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] {
              ModelSpec::from_text(R"({"inputs": [1], "nodes": []})", "m.json");
            }).find("\"inputs\" must be an array of strings"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] {
              ModelSpec::from_text(R"({"inputs": [], "nodes": [], "nodez": 1})", "m.json");
            }).find("unknown top-level key 'nodez'"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] {
              ModelSpec::from_text(R"({"inputs": [], "nodes": [], "loss": [1]})", "m.json");
            }).find("m.json: at /loss: the loss must be an object, got [1]"),
            std::string::npos);
}

// The "loss" section is carried as it is (the application checks it) and
// written back; a spec without one writes none, as before.
TEST(ModelSpec, CarriesTheLossSection) {
  const ModelSpec spec = ModelSpec::from_text(
      R"({"inputs": ["x"], "nodes": [], "loss": {"distortion": [{"type": "ms_ssim"}], "lambda": 8.73}})");
  EXPECT_EQ(spec.loss["distortion"][0]["type"], "ms_ssim");
  EXPECT_EQ(spec.loss["lambda"], 8.73);
  EXPECT_EQ(ModelSpec::from_json(spec.to_json()).loss, spec.loss);
  const ModelSpec plain = ModelSpec::from_text(R"({"inputs": ["x"], "nodes": []})");
  EXPECT_TRUE(plain.loss.is_null());
  EXPECT_FALSE(plain.to_json().contains("loss"));
}

}  // namespace
}  // namespace plexus

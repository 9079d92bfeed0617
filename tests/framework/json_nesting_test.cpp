// Depth limits on the JSON that Plexus reads: the nesting count itself, a
// model spec (from a file or from a model file's metadata) and a checkpoint's
// plugin-layer metadata, each nested far past the limit, get an error naming
// where the JSON came from instead of a stack overflow.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "plexus/testing/gtest_helpers.h"
#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/json_nesting.h"
#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

using testing::error_of;

// A file name in a fresh folder of the system's temporary directory.
std::string scratch_file(const std::string& name) {
  const auto folder = std::filesystem::temp_directory_path() / ("plexus-json-nesting-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  return (folder / name).string();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// {"a": [[[ ... ]]]} with `depth` levels in all.
std::string nested(int depth) { return R"({"a":)" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}"; }

TEST(JsonNesting, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("3"), 0);
  EXPECT_EQ(json_nesting_depth("{}"), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":[]}],"c":{}})"), 4);
  EXPECT_EQ(json_nesting_depth(R"({"a":"[[[[{{"})"), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a":"\"[[[","b":[]})"), 2);  // an escaped quote does not end the string
  EXPECT_EQ(json_nesting_depth(R"(["\\",[]])"), 2);             // an escaped backslash does not escape the quote
  EXPECT_EQ(json_nesting_depth(nested(64)), 64);
  // It stops counting once past the limit, however deep the text goes.
  EXPECT_EQ(json_nesting_depth(nested(100000), 64), 65);
}

TEST(JsonNesting, TheLimitItselfIsAccepted) {
  EXPECT_NO_THROW(check_json_nesting(nested(kMaxJsonNesting), "x.json"));
  const std::string message = error_of<ConfigError>([] { check_json_nesting(nested(kMaxJsonNesting + 1), "x.json"); });
  EXPECT_EQ(message, "x.json: the JSON nests arrays or objects more than 64 levels deep");
}

TEST(JsonNesting, DeepModelSpecNamesItsSource) {
  // 120,000 levels: deep enough to overflow the stack of a recursive copy.
  const std::string text = R"({"inputs":["x"],"nodes":[{"name":"n","type":"ReLU","inputs":["x"],"outputs":["y"],)"
                           R"("params":)" +
                           nested(120000) + "}]}";
  const std::string message = error_of<ConfigError>([&] { ModelSpec::from_text(text, "deep.json"); });
  EXPECT_EQ(message, "deep.json: the JSON nests arrays or objects more than 64 levels deep");
}

TEST(JsonNesting, DeepModelSpecInModelFileMetadataIsRefused) {
  TensorFile file;
  file.metadata["model_spec"] = R"({"inputs":["x"],"nodes":[],"extra":)" + nested(120000) + "}";
  const std::string path = scratch_file("model.safetensors");
  save_safetensors(path, file);
  const TensorFile loaded = load_safetensors(path);
  std::filesystem::remove(path);
  const std::string message = error_of<IoError>([&] { spec_from_checkpoint(loaded, path); });
  EXPECT_TRUE(contains(message, "model.safetensors (model spec in its metadata): the JSON nests arrays or objects "
                                "more than 64 levels deep"))
      << message;
}

TEST(JsonNesting, DeepPluginLayerMetadataIsRefused) {
  TensorFile file;
  file.metadata["model_spec"] =
      R"({"inputs":["x"],"nodes":[{"name":"r","type":"ReLU","inputs":["x"],"outputs":["y"]}]})";
  file.metadata["plugin_layers"] = nested(120000);
  const std::string path = scratch_file("checkpoint.safetensors");
  save_safetensors(path, file);
  const TensorFile loaded = load_safetensors(path);
  std::filesystem::remove(path);
  Registry registry;
  register_builtin_layers(registry);
  const std::string message = error_of<ConfigError>([&] { spec_from_checkpoint(loaded, path, registry); });
  EXPECT_TRUE(contains(message, "checkpoint.safetensors': metadata \"plugin_layers\": the JSON nests arrays or "
                                "objects more than 64 levels deep"))
      << message;
}

}  // namespace
}  // namespace plexus

#pragma once
// ModelSpec: a model as data. The JSON form:
//   {
//     "name": "tiny",
//     "inputs": ["x", "target"],
//     "nodes": [
//       {"name": "fc", "type": "FullyConnected", "inputs": ["x"], "outputs": ["y"],
//        "params": {"out_features": 4}},
//       {"name": "loss", "type": "MSELoss", "inputs": ["y", "target"], "outputs": ["mse"]}
//     ]
//   }
// Node order in the file does not matter; the Net sorts it.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace plexus {

struct NodeSpec {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  nlohmann::json params = nlohmann::json::object();
};

struct ModelSpec {
  std::string name;
  std::vector<std::string> inputs;
  std::vector<NodeSpec> nodes;
  // The training loss an application reads from the spec (plexus-ae: a
  // "loss" object, apps/autoencoder/README.md); null when the spec has none.
  // Carried as it is: the application checks its keys.
  nlohmann::json loss;
  // How an application codes the model's latents (plexus-ae: a "codec"
  // object, docs/writing-models.md); null when the spec has none. Carried as
  // it is: the application checks it against the graph.
  nlohmann::json codec;
  std::string source = "<memory>";  // where it came from, for messages

  // Builder API: spec.add_input("x").add_node({...});
  ModelSpec& add_input(const std::string& input);
  ModelSpec& add_node(NodeSpec node);
  // The node named `name`, or nullptr when there is none.
  const NodeSpec* node_named(const std::string& name) const;

  // Throws ConfigError naming the source and the offending field.
  static ModelSpec from_json(const nlohmann::json& json, const std::string& source = "<memory>");
  static ModelSpec from_text(const std::string& text, const std::string& source = "<memory>");
  // Throws IoError when unreadable, ConfigError when malformed (with line).
  static ModelSpec from_file(const std::string& path);
  nlohmann::json to_json() const;
};

}  // namespace plexus

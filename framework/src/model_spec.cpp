#include "plexus/model_spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include "plexus/error.h"
#include "plexus/json_errors.h"
#include "plexus/json_nesting.h"

namespace plexus {

ModelSpec& ModelSpec::add_input(const std::string& input) {
  inputs.push_back(input);
  return *this;
}

ModelSpec& ModelSpec::add_node(NodeSpec node) {
  nodes.push_back(std::move(node));
  return *this;
}

const NodeSpec* ModelSpec::node_named(const std::string& name) const {
  for (const NodeSpec& node : nodes)
    if (node.name == name) return &node;
  return nullptr;
}

namespace {
std::vector<std::string> string_list(const nlohmann::json& value, const std::string& where) {
  if (!value.is_array()) throw ConfigError(where + " must be an array of strings, got " + value.dump());
  std::vector<std::string> result;
  for (const auto& item : value) {
    if (!item.is_string()) throw ConfigError(where + " must be an array of strings, got " + value.dump());
    result.push_back(item.get<std::string>());
  }
  return result;
}
ModelSpec parse_spec(const nlohmann::json& json, const std::string& source);
}  // namespace

ModelSpec ModelSpec::from_json(const nlohmann::json& json, const std::string& source) {
  // Every value is type-checked below; the wrapper names the file should a
  // check be missing.
  return read_json_from(source, "", [&] { return parse_spec(json, source); });
}

namespace {
ModelSpec parse_spec(const nlohmann::json& json, const std::string& source) {
  ModelSpec spec;
  spec.source = source;
  if (!json.is_object()) throw ConfigError(source + ": a model spec must be a JSON object");
  static const std::set<std::string> known = {"name", "inputs", "nodes", "description", "loss", "codec"};
  for (auto it = json.begin(); it != json.end(); ++it)
    if (!known.count(it.key()))
      throw ConfigError(source + ": unknown top-level key '" + it.key() +
                        "' (expected name, description, inputs, nodes, loss, codec)");
  if (json.contains("codec")) {
    if (!json["codec"].is_object())
      throw ConfigError(source + ": at /codec: the codec section must be an object, got " + json["codec"].dump());
    spec.codec = json["codec"];
  }
  if (json.contains("loss")) {
    if (!json["loss"].is_object())
      throw ConfigError(source + ": at /loss: the loss must be an object, got " + json["loss"].dump());
    spec.loss = json["loss"];
  }
  if (json.contains("name") && !json["name"].is_string())
    throw ConfigError(source + ": at /name: the model name must be a string, got " + json["name"].dump());
  spec.name = json.value("name", "");
  if (!json.contains("inputs")) throw ConfigError(source + ": missing \"inputs\" (the names of the model's inputs)");
  spec.inputs = string_list(json["inputs"], source + ": \"inputs\"");
  if (!json.contains("nodes") || !json["nodes"].is_array()) throw ConfigError(source + ": missing \"nodes\" array");
  std::size_t index = 0;
  for (const auto& node : json["nodes"]) {
    std::string where = source + ": nodes[" + std::to_string(index++) + "]";
    if (!node.is_object()) throw ConfigError(where + " must be an object");
    NodeSpec n;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string& key = it.key();
      if (key == "name" || key == "type") {
        if (!it->is_string()) throw ConfigError(where + ": \"" + key + "\" must be a string");
      } else if (key != "inputs" && key != "outputs" && key != "params") {
        throw ConfigError(where + ": unknown key '" + key + "' (expected name, type, inputs, outputs, params)");
      }
    }
    if (!node.contains("name")) throw ConfigError(where + ": missing \"name\"");
    n.name = node["name"].get<std::string>();
    where += " ('" + n.name + "')";
    if (!node.contains("type")) throw ConfigError(where + ": missing \"type\"");
    n.type = node["type"].get<std::string>();
    n.inputs =
        node.contains("inputs") ? string_list(node["inputs"], where + ": \"inputs\"") : std::vector<std::string>{};
    if (!node.contains("outputs")) throw ConfigError(where + ": missing \"outputs\"");
    n.outputs = string_list(node["outputs"], where + ": \"outputs\"");
    if (node.contains("params")) {
      if (!node["params"].is_object()) throw ConfigError(where + ": \"params\" must be an object");
      n.params = node["params"];
    }
    spec.nodes.push_back(std::move(n));
  }
  return spec;
}
}  // namespace

ModelSpec ModelSpec::from_text(const std::string& text, const std::string& source) {
  check_json_nesting(text, source);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset of the error; report line and column.
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string detail = e.what();
    auto colon = detail.rfind(": ");
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
    throw ConfigError(source + ":" + std::to_string(line) + ":" + std::to_string(column) +
                      ": malformed JSON: " + detail);
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number too large for a double
    throw_json_error(source, "", e);
  }
  return from_json(json, source);
}

ModelSpec ModelSpec::from_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw IoError("cannot open model spec '" + path + "' (no such file or not readable)");
  std::stringstream text;
  text << file.rdbuf();
  return from_text(text.str(), path);
}

nlohmann::json ModelSpec::to_json() const {
  nlohmann::json json;
  json["name"] = name;
  json["inputs"] = inputs;
  json["nodes"] = nlohmann::json::array();
  for (const auto& n : nodes)
    json["nodes"].push_back(
        {{"name", n.name}, {"type", n.type}, {"inputs", n.inputs}, {"outputs", n.outputs}, {"params", n.params}});
  if (!loss.is_null()) json["loss"] = loss;
  if (!codec.is_null()) json["codec"] = codec;
  return json;
}

}  // namespace plexus

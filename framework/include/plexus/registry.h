#pragma once
// Registry: layer type name -> factory. Built-in layers and plugins register
// through the same add() call.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plexus/layer.h"
#include "plexus/layer_config.h"

namespace plexus {

using LayerFactory = std::function<std::unique_ptr<Layer>(LayerConfig& config)>;

struct LayerTypeInfo {
  std::string type;
  std::string description;
  std::string origin;  // "built-in" or the plugin file that registered it
  LayerFactory factory;
};

class Registry {
 public:
  // Registers `type`. Throws PluginError when the name is taken, naming
  // both origins.
  void add(const std::string& type, LayerFactory factory, const std::string& description = "");

  bool contains(const std::string& type) const;
  const LayerTypeInfo& info(const std::string& type) const;  // throws like create()
  std::vector<std::string> types() const;

  // Builds a layer for node `node_name`. Throws ConfigError for an unknown
  // type (listing close matches) or for params the layer rejects or ignores.
  std::unique_ptr<Layer> create(const std::string& type, const std::string& node_name,
                                const nlohmann::json& params) const;

  // The parameters a layer of `type` reads, in the order it reads them:
  // its factory run once on LayerConfig::describing(). A layer that rejects
  // the placeholder of a required parameter (an empty list, say) stops
  // there, so the list holds the keys it read up to that check.
  std::vector<ParameterInfo> parameters(const std::string& type) const;

  // Registrations made while an origin is set are attributed to it (the
  // plugin loader sets the plugin path).
  void set_origin(const std::string& origin) { origin_ = origin; }

  // The plugin loader records each plugin file it loaded (by file identity,
  // so two paths to one file are one plugin).
  bool has_plugin(const std::string& identity) const { return plugins_.count(identity) > 0; }
  void record_plugin(const std::string& identity) { plugins_.insert(identity); }

 private:
  std::map<std::string, LayerTypeInfo> types_;
  std::string origin_ = "built-in";
  std::set<std::string> plugins_;
};

// Up to `count` registered names closest to `name` (edit distance), for
// "did you mean" hints.
std::vector<std::string> close_matches(const std::string& name, const std::vector<std::string>& candidates,
                                       std::size_t count = 3);

}  // namespace plexus

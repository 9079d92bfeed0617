#include "plexus/registry.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "plexus/error.h"

namespace plexus {

namespace {
// Levenshtein distance, case-insensitive: "conv2d" is close to "Conv2d".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

std::vector<std::string> close_matches(const std::string& name,
                                       const std::vector<std::string>& candidates,
                                       std::size_t count) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& candidate : candidates) {
    std::size_t distance = edit_distance(name, candidate);
    // Close: at most a third of the longer name differs.
    if (distance * 3 <= std::max(name.size(), candidate.size())) scored.emplace_back(distance, candidate);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> result;
  for (std::size_t i = 0; i < scored.size() && i < count; ++i) result.push_back(scored[i].second);
  return result;
}

void Registry::add(const std::string& type, LayerFactory factory, const std::string& description) {
  if (type.empty()) throw PluginError("cannot register a layer type with an empty name (from " + origin_ + ")");
  if (!factory) throw PluginError("layer type '" + type + "' registered without a factory (from " + origin_ + ")");
  auto existing = types_.find(type);
  if (existing != types_.end())
    throw PluginError("layer type '" + type + "' is registered twice: first by " +
                      existing->second.origin + ", again by " + origin_);
  types_[type] = LayerTypeInfo{type, description, origin_, std::move(factory)};
}

bool Registry::contains(const std::string& type) const { return types_.count(type) > 0; }

std::vector<std::string> Registry::types() const {
  std::vector<std::string> names;
  for (const auto& entry : types_) names.push_back(entry.first);
  return names;
}

const LayerTypeInfo& Registry::info(const std::string& type) const {
  auto it = types_.find(type);
  if (it != types_.end()) return it->second;
  std::string message = "unknown layer type '" + type + "'";
  auto close = close_matches(type, types());
  if (!close.empty()) {
    message += "; did you mean ";
    for (std::size_t i = 0; i < close.size(); ++i) message += (i ? ", '" : "'") + close[i] + "'";
    message += "?";
  }
  message += " (registered: ";
  auto all = types();
  for (std::size_t i = 0; i < all.size(); ++i) message += (i ? ", " : "") + all[i];
  message += "; load the plugin that defines it with --plugin or PLEXUS_PLUGIN_PATH)";
  throw ConfigError(message);
}

std::unique_ptr<Layer> Registry::create(const std::string& type, const std::string& node_name,
                                        const nlohmann::json& params) const {
  const LayerTypeInfo& entry = [&]() -> const LayerTypeInfo& {
    try {
      return info(type);
    } catch (const ConfigError& e) {
      throw ConfigError("node '" + node_name + "': " + e.what());
    }
  }();
  LayerConfig config(node_name, type, params);
  std::unique_ptr<Layer> layer = entry.factory(config);
  if (!layer) throw PluginError("the factory of layer type '" + type + "' (" + entry.origin + ") returned null");
  config.check_all_used();
  layer->set_identity(type, node_name);
  return layer;
}

Registry builtin_registry() {
  Registry registry;
  register_builtin_layers(registry);
  return registry;
}

}  // namespace plexus

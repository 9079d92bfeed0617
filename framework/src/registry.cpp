#include "plexus/registry.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "plexus/error.h"

namespace plexus {

namespace {
// Edit distance counting insertions, deletions, substitutions and swaps of
// adjacent letters (optimal string alignment), case-insensitive: "conv2d" and
// "GND" are one edit from "Conv2d" and "GDN".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}
}  // namespace

std::vector<std::string> close_matches(const std::string& name, const std::vector<std::string>& candidates,
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
    throw PluginError("layer type '" + type + "' is registered twice: first by " + existing->second.origin +
                      ", again by " + origin_);
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

std::vector<ParameterInfo> Registry::parameters(const std::string& type) const {
  const LayerTypeInfo& entry = info(type);
  LayerConfig config = LayerConfig::describing(type);
  try {
    entry.factory(config);
  } catch (const ConfigError&) {
    // A check of a placeholder value: the keys read before it are recorded.
  }
  return config.parameters();
}

}  // namespace plexus

#pragma once
// A built-in Plexus layer inside a plugin layer: created through the public
// registry of built-ins (plexus::builtin_registry) from a factory call that
// names the plugin layer, so that its messages say "node 'x' (PrunedConv2d)".
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "plexus/layer.h"

namespace sparse_conv {

// The built-in `builtin_type` for node `node_name` with `params`, reporting
// itself (in errors) as `reported_type`. Throws ConfigError like Registry::create.
std::unique_ptr<plexus::Layer> make_builtin_layer(const std::string& builtin_type, const std::string& node_name,
                                                  const std::string& reported_type, const nlohmann::json& params);

}  // namespace sparse_conv

// make_builtin_layer (builtin_layer.h).
#include "builtin_layer.h"

#include "plexus/builtin_layers.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace sparse_conv {

std::unique_ptr<plexus::Layer> make_builtin_layer(const std::string& builtin_type, const std::string& node_name,
                                                  const std::string& reported_type, const nlohmann::json& params) {
  // A copy of the built-ins this plugin owns: it holds no pointer to the caller's registry.
  static const plexus::Registry builtins = plexus::builtin_registry();
  plexus::LayerConfig config(node_name, reported_type, params);
  std::unique_ptr<plexus::Layer> layer = builtins.info(builtin_type).factory(config);
  config.check_all_used();
  layer->set_identity(reported_type, node_name);
  return layer;
}

}  // namespace sparse_conv

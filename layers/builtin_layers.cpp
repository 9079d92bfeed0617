// Explicit registration of every built-in layer, through the same
// Registry::add() a plugin uses. One line per layer; no static initialisers,
// so nothing silently disappears when the linker prunes a library.
#include "plexus/registry.h"
#include "gdn/gdn.h"
#include "relu/relu.h"

namespace plexus {

void register_builtin_layers(Registry& registry) {
  layers::register_gdn(registry);
  layers::register_relu(registry);
}

}  // namespace plexus

// Explicit registration of every built-in layer, through the same
// Registry::add() a plugin uses. One line per layer; no static initialisers,
// so nothing silently disappears when the linker prunes a library.
#include "fully_connected/fully_connected.h"
#include "plexus/registry.h"
#include "relu/relu.h"
#include "softmax_projection/softmax_projection.h"

namespace plexus {

void register_builtin_layers(Registry& registry) {
  layers::register_relu(registry);
  layers::register_fully_connected(registry);
  layers::register_softmax_projection(registry);
}

}  // namespace plexus

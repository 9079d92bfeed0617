// Explicit registration of every built-in layer, through the same
// Registry::add() a plugin uses. One line per layer; no static initialisers,
// so nothing silently disappears when the linker prunes a library.
#include "conv2d/conv2d.h"
#include "conv_transpose2d/conv_transpose2d.h"
#include "plexus/registry.h"
#include "relu/relu.h"

namespace plexus {

void register_builtin_layers(Registry& registry) {
  layers::register_conv2d(registry);
  layers::register_conv_transpose2d(registry);
  layers::register_relu(registry);
}

}  // namespace plexus

#pragma once
// The layers that ship with Plexus (layers/): convolutions, GDN, the entropy
// models, losses, ... Each registers through Registry::add, the call a plugin
// makes; this library owns the list, the framework knows none of them.
#include "plexus/registry.h"

namespace plexus {

// Registers every built-in layer (one line each in layers/builtin_layers.cpp).
void register_builtin_layers(Registry& registry);
// A registry holding the built-in layers.
Registry builtin_registry();

}  // namespace plexus

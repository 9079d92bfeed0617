// A plugin that registers a type the built-ins already have ("ReLU").
#include "plexus/plugin.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add("ReLU", [](plexus::LayerConfig&) -> std::unique_ptr<plexus::Layer> { return nullptr; });
}

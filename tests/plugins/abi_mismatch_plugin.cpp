// A plugin built for another plugin ABI: the loader must refuse it before
// calling plexus_plugin_register (which would register "AbiMismatchLayer").
#include "plexus/plugin.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion + 1; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add("AbiMismatchLayer", [](plexus::LayerConfig&) -> std::unique_ptr<plexus::Layer> { return nullptr; });
}

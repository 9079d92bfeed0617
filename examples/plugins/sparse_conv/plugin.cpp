// The two entry points Plexus looks up in a plugin (plexus/plugin.h).
#include "plexus/plugin.h"
#include "pruned_conv.h"
#include "sparse_conv.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  sparse_conv::register_pruned_layers(*registry);
  sparse_conv::register_sparse_layers(*registry);
}

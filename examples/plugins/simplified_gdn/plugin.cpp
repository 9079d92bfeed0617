// The two entry points Plexus looks up in a plugin (plexus/plugin.h).
#include "plexus/plugin.h"
#include "simplified_gdn.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) { simplified_gdn::register_layers(*registry); }

// Half a plugin: the ABI query is there, the register function is missing.
#include "plexus/plugin.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

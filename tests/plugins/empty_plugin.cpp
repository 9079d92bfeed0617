// A well-formed plugin whose register function adds no layer type (a
// forgotten registry->add): the loader warns about it.
#include "plexus/plugin.h"

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }
extern "C" void plexus_plugin_register(plexus::Registry*) {}

// The loader's bad cases, one shared library each, built from this file with
// BROKEN_PLUGIN set to one of (tests/plugins/CMakeLists.txt):
//   1 no_entry        not a Plexus plugin: it exports neither entry point;
//   2 no_register     half a plugin: the ABI query is there, the register function is missing;
//   3 abi_mismatch    built for another plugin ABI: the loader must refuse it before calling
//                     plexus_plugin_register (which would register "AbiMismatchLayer");
//   4 duplicate_relu  registers a type the built-ins already have ("ReLU");
//   5 empty           well formed, but its register function adds no layer type (a forgotten
//                     registry->add): the loader warns about it.
#include "plexus/plugin.h"

#if BROKEN_PLUGIN == 1
extern "C" int plexus_test_unrelated_function() { return 42; }
#else
extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion + (BROKEN_PLUGIN == 3 ? 1 : 0); }
#endif

#if BROKEN_PLUGIN == 3 || BROKEN_PLUGIN == 4
extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add(BROKEN_PLUGIN == 3 ? "AbiMismatchLayer" : "ReLU",
                [](plexus::LayerConfig&) -> std::unique_ptr<plexus::Layer> { return nullptr; });
}
#elif BROKEN_PLUGIN == 5
extern "C" void plexus_plugin_register(plexus::Registry*) {}
#endif

#pragma once
// The plugin ABI. A plugin is a shared library that defines two functions
// with C linkage:
//
//   extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }
//   extern "C" void plexus_plugin_register(plexus::Registry* registry) {
//     registry->add("MyLayer", [](plexus::LayerConfig& c) { return std::make_unique<MyLayer>(c); });
//   }
//
// The loader refuses a library whose ABI version differs from the one this
// framework was built with, naming both.
#include <string>
#include <vector>

#include "plexus/registry.h"

namespace plexus {

// Bumped whenever Layer, LayerConfig, Registry, Tensor or Context change
// layout or virtuals (a plugin may hold a LayerConfig of its own).
// 8: Layer::traits() (LayerTraits) in place of the hint methods, ForwardOptions
// passed with forward, KernelSettings on Context.
inline constexpr int kPluginAbiVersion = 8;
// The last ABI whose Layer had the hint methods (has_cuda(), stores_bf16(), ...):
// the loader tells a plugin built against it or earlier how to migrate.
inline constexpr int kLastAbiWithLayerHints = 7;
inline constexpr const char* kPluginAbiVersionSymbol = "plexus_plugin_abi_version";
inline constexpr const char* kPluginRegisterSymbol = "plexus_plugin_register";

using PluginAbiVersionFunction = int (*)();
using PluginRegisterFunction = void (*)(Registry*);

// What load_plugin did.
struct LoadedPlugin {
  std::vector<std::string> types;  // the layer types it registered
  bool already_loaded = false;     // the same file was loaded into this registry before: nothing done
};

// Loads one plugin library and registers its layers. Throws PluginError for
// a missing file, a library that is not a Plexus plugin, or an ABI mismatch.
// Loading a file already loaded into `registry` (by this or another path,
// e.g. --plugin and PLEXUS_PLUGIN_PATH) is a no-op; a plugin that registers
// no layer type gets a warning. The library stays loaded for the life of the process.
LoadedPlugin load_plugin(const std::string& path, Registry& registry);

// Plugins named in the PLEXUS_PLUGIN_PATH environment variable: a
// colon-separated list of .so files or folders (every lib*.so inside).
std::vector<std::string> plugins_from_environment();

}  // namespace plexus

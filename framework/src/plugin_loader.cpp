#include "plexus/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "plexus/error.h"

namespace plexus {

LoadedPlugin load_plugin(const std::string& path, Registry& registry) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::exists(path, error)) throw PluginError("plugin '" + path + "' not found (no such file)");
  if (fs::is_directory(path, error))
    throw PluginError("plugin '" + path + "' is a folder; name the .so file inside it");
  // One file, whatever the path (symlinks, relative or absolute): device and inode.
  struct stat file_status {};
  const std::string identity = ::stat(path.c_str(), &file_status) == 0
                                   ? std::to_string(file_status.st_dev) + ":" + std::to_string(file_status.st_ino)
                                   : fs::weakly_canonical(path, error).string();
  LoadedPlugin loaded;
  if (registry.has_plugin(identity)) {
    loaded.already_loaded = true;
    return loaded;
  }

  // RTLD_GLOBAL is not needed: a plugin links against libplexus itself.
  // The handle is never closed: registered factories point into the library.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    throw PluginError("plugin '" + path + "' cannot be loaded: " + (reason ? reason : "unknown dlopen error"));
  }
  auto abi_version = reinterpret_cast<PluginAbiVersionFunction>(dlsym(handle, kPluginAbiVersionSymbol));
  auto register_layers = reinterpret_cast<PluginRegisterFunction>(dlsym(handle, kPluginRegisterSymbol));
  if (!abi_version || !register_layers) {
    dlclose(handle);
    throw PluginError("'" + path + "' is not a Plexus plugin: it does not export extern \"C\" " +
                      (!abi_version ? kPluginAbiVersionSymbol : kPluginRegisterSymbol) +
                      "() (see docs/writing-plugins.md)");
  }
  int version = abi_version();
  if (version != kPluginAbiVersion) {
    dlclose(handle);
    std::string message = "plugin '" + path + "' was built for Plexus plugin ABI version " + std::to_string(version) +
                          ", but this Plexus has ABI version " + std::to_string(kPluginAbiVersion);
    if (version >= 1 && version <= kLastAbiWithLayerHints)
      message += "; ABI 8 replaced the Layer hint methods (has_cuda(), cuda_graph_capturable(), stores_bf16(), "
                 "input_is_differentiable(), set_discard_input(), set_output_activation(), ...) by one "
                 "traits(device) method returning plexus::LayerTraits and ForwardOptions passed with forward: "
                 "see docs/writing-plugins.md, 'Migrating from ABI 7', change the plugin's Layer classes, and";
    else message += ";";
    throw PluginError(message + " rebuild the plugin against this Plexus");
  }
  const std::vector<std::string> before = registry.types();
  registry.set_origin("plugin " + path);
  try {
    register_layers(&registry);
  } catch (...) {
    registry.set_origin("built-in");
    throw;
  }
  registry.set_origin("built-in");
  registry.record_plugin(identity);
  for (const auto& type : registry.types())
    if (!std::binary_search(before.begin(), before.end(), type)) loaded.types.push_back(type);
  if (loaded.types.empty())
    spdlog::warn("plugin '{}' registered no layer type: its {}() called Registry::add for nothing", path,
                 kPluginRegisterSymbol);
  return loaded;
}

std::vector<std::string> plugins_from_environment() {
  namespace fs = std::filesystem;
  std::vector<std::string> plugins;
  const char* value = std::getenv("PLEXUS_PLUGIN_PATH");
  if (!value) return plugins;
  std::stringstream list(value);
  std::string entry;
  while (std::getline(list, entry, ':')) {
    if (entry.empty()) continue;
    std::error_code error;
    if (fs::is_directory(entry, error)) {
      std::vector<std::string> found;
      for (const auto& file : fs::directory_iterator(entry)) {
        auto name = file.path().filename().string();
        if (name.rfind("lib", 0) == 0 && file.path().extension() == ".so") found.push_back(file.path().string());
      }
      std::sort(found.begin(), found.end());
      plugins.insert(plugins.end(), found.begin(), found.end());
    } else {
      plugins.push_back(entry);  // load_plugin reports a missing file by name
    }
  }
  return plugins;
}

}  // namespace plexus

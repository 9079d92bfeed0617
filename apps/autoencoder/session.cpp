#include "session.h"

#include <spdlog/spdlog.h>

#include "plexus/context.h"
#include "plexus/error.h"
#include "plexus/plugin.h"

namespace plexus::ae {

Registry make_registry(const std::vector<std::string>& plugins) {
  Registry registry = builtin_registry();
  for (const auto& plugin : plugins_from_environment()) {
    load_plugin(plugin, registry);
    spdlog::info("loaded plugin {} (from PLEXUS_PLUGIN_PATH)", plugin);
  }
  for (const auto& plugin : plugins) {
    load_plugin(plugin, registry);
    spdlog::info("loaded plugin {}", plugin);
  }
  return registry;
}

Device choose_device(const std::string& text) {
  Device device;
  try {
    device = parse_device(text);
  } catch (const Error& e) {
    throw ConfigError("--device '" + text + "': expected cpu, cuda, cuda:N or auto");
  }
  if (device.is_cuda() && !cuda_available())
    throw DeviceError("--device " + text + ": " +
                      (built_with_cuda() ? std::string("no CUDA GPU is visible to this process")
                                         : std::string("this plexus-ae was built without CUDA")) +
                      "; use --device cpu (or auto)");
  return device;
}

}  // namespace plexus::ae

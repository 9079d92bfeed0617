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
  // parse_device names the device and says what is wrong; prefix the option.
  try {
    return parse_device(text);
  } catch (const DeviceError& e) {
    throw DeviceError(std::string("--device: ") + e.what());
  } catch (const Error& e) {
    throw ConfigError(std::string("--device: ") + e.what());
  }
}

}  // namespace plexus::ae

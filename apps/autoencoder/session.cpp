#include "session.h"

#include <spdlog/spdlog.h>

#include "plexus/builtin_layers.h"
#include "plexus/context.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"
#include "plexus/plugin.h"

namespace plexus::ae {

Registry make_registry(const std::vector<std::string>& plugins) {
  Registry registry = builtin_registry();
  auto load = [&](const std::string& plugin, const char* where) {
    if (load_plugin(plugin, registry).already_loaded)
      spdlog::info("plugin {}{} is already loaded; ignored", plugin, where);
    else spdlog::info("loaded plugin {}{}", plugin, where);
  };
  for (const auto& plugin : plugins_from_environment()) load(plugin, " (from PLEXUS_PLUGIN_PATH)");
  for (const auto& plugin : plugins) load(plugin, "");
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

void use_cpu_threads(int threads) {
  if (threads < 0 || threads > kMaxCpuThreads)
    throw ConfigError("--cpu-threads must be in [0, " + std::to_string(kMaxCpuThreads) + "] (0: every core), got " +
                      std::to_string(threads));
  set_cpu_threads(threads);
}

void add_max_image_pixels_option(CLI::App& command, std::int64_t& value, const std::string& help) {
  CLI::Range range(std::int64_t{1}, kMaxImagePixelsOption);
  range.description("");  // the help says the bounds; CLI11's "INT:INT in [1 - 1099511627776]" does not read
  command.add_option("--max-image-pixels", value, help + " (1 to 2^40)")->type_name("PIXELS")->check(range);
}

}  // namespace plexus::ae

#include "summary_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "plexus/train/exit_codes.h"
#include "plexus/error.h"
#include "session.h"

namespace plexus::ae {

namespace {

// "integer in [1, 65536], required" or "number, default 0.01".
std::string parameter_text(const ParameterInfo& parameter) {
  std::string text = parameter.kind;
  if (!parameter.range.empty()) text += " in " + parameter.range;
  text += parameter.required ? ", required" : ", default " + parameter.default_value;
  return text;
}

std::string parameters_text(const Registry& registry, const std::string& type) {
  std::vector<ParameterInfo> parameters;
  try {
    parameters = registry.parameters(type);
  } catch (const std::exception& e) {
    return "  params: could not be read (" + std::string(e.what()) + ")\n";
  }
  if (parameters.empty()) return "  params: none\n";
  std::size_t width = 0;
  for (const ParameterInfo& parameter : parameters) width = std::max(width, parameter.key.size());
  std::string text = "  params:\n";
  for (const ParameterInfo& parameter : parameters)
    text +=
        "    " + parameter.key + std::string(width + 2 - parameter.key.size(), ' ') + parameter_text(parameter) + "\n";
  return text;
}

}  // namespace

std::string layer_listing(const Registry& registry) {
  std::vector<std::string> types = registry.types();
  std::sort(types.begin(), types.end());
  std::string text;
  for (const std::string& type : types) {
    const LayerTypeInfo& info = registry.info(type);
    text += (text.empty() ? "" : "\n") + type + "  (" + info.origin + ")\n";
    text += "  " + (info.description.empty() ? std::string("(no description)") : info.description) + "\n";
    text += parameters_text(registry, type);
  }
  return text;
}

int run_layers(const LayersOptions& options) {
  const Registry registry = make_registry(options.plugins);
  std::fputs(layer_listing(registry).c_str(), stdout);
  return train::kExitOk;
}

void add_layers_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<LayersOptions>();
  CLI::App* command = app.add_subcommand(
      "layers", "list the layer types a model spec can name: each one's origin (built-in or the plugin file), "
                "what it computes, and its \"params\" with their types and defaults");
  command
      ->add_option("--plugin", options->plugins,
                   "a layer plugin .so whose types to list too (repeatable; PLEXUS_PLUGIN_PATH is also read)")
      ->type_name("FILE");
  command->footer("Prints, sorted by name, every registered layer type:\n"
                  "  Conv2d  (built-in)\n"
                  "    2-D convolution ...\n"
                  "    params:\n"
                  "      out_channels    integer in [1, ...], required\n"
                  "      stride          integer in [1, ...], default 1\n"
                  "A required parameter must be in the node's \"params\"; any other takes its default when left out.\n"
                  "Examples:\n"
                  "  plexus-ae layers\n"
                  "  plexus-ae layers --plugin ./libmylayer.so");
  command->callback([options, &exit_code] { exit_code = run_layers(*options); });
}

}  // namespace plexus::ae

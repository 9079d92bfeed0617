#include "cli_suggestions.h"

#include "plexus/registry.h"

namespace plexus::ae {

namespace {

// "--steps", "--help": every long name a command accepts.
std::vector<std::string> long_options(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

const CLI::Option* find_long_option(const CLI::App& command, const std::string& name) {
  for (const CLI::Option* option : command.get_options())
    for (const std::string& known : option->get_lnames())
      if ("--" + known == name) return option;
  return nullptr;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  return text;
}

// "; did you mean 'train'?" or, without a close name, "; known: 'train', 'eval'".
std::string hint(const std::string& name, const std::vector<std::string>& known, const char* kind) {
  const auto close = close_matches(name, known, 1);  // the closest only
  if (!close.empty()) return "; did you mean " + quoted_list(close) + "?";
  return std::string("; ") + kind + ": " + quoted_list(known);
}

}  // namespace

std::optional<std::string> diagnose_unknown_names(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* command = &app;
  std::string command_name = app.get_name();
  bool expect_value = false;
  for (const std::string& arg : args) {
    if (arg == "--") break;  // everything after is positional
    if (expect_value) {
      expect_value = false;
      continue;
    }
    if (arg.rfind("--", 0) == 0) {
      const std::string name = arg.substr(0, arg.find('='));
      const CLI::Option* option = find_long_option(*command, name);
      if (!option)
        return "'" + command_name + "' has no option '" + name + "'" + hint(name, long_options(*command), "options") +
               " (see '" + command_name + " --help')";
      expect_value = option->get_type_size() != 0 && arg.find('=') == std::string::npos;
      continue;
    }
    if (arg.rfind('-', 0) == 0) continue;  // short options: CLI11's own message
    // A bare word: the next subcommand, where the command has any.
    const auto subcommands = command->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) continue;  // a positional value
    const CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (const CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->check_name(arg)) next = sub;
    }
    if (!next)
      return "unknown command '" + arg + "'" + hint(arg, names, "commands") + " (see '" + command_name + " --help')";
    command = next;
    command_name += " " + next->get_name();
  }
  return std::nullopt;
}

}  // namespace plexus::ae

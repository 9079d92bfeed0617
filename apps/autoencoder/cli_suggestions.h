#pragma once
// "Did you mean" for the command line: after CLI11 rejects the arguments,
// looks for the first subcommand or --option that no command registered and
// suggests the closest registered one. Works over whatever subcommands and
// options the CLI11 app holds, so commands added later are covered too.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace plexus::ae {

// A message such as "unknown command 'trian'; did you mean 'train'?" or
// "'plexus-ae train' has no option '--step'; did you mean '--steps'?", or
// nothing when every name in `args` (argv without the program name) is known.
std::optional<std::string> diagnose_unknown_names(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace plexus::ae

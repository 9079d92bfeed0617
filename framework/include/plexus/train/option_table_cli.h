#pragma once
// An OptionTable's command-line options, declared on a CLI11 command
// (header-only: the framework library itself does not depend on CLI11).
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/train/option_table.h"

namespace plexus::train {

// Declares `--<name>` for every row of `table` on `command`, storing into
// `options` (which must outlive the parse). Lists are comma-separated or
// repeated; a bool row is a flag, or an option of its two words.
template <class Options>
void add_options(CLI::App& command, const OptionTable<Options>& table, Options& options) {
  for (const OptionRow<Options>& row : table.rows()) {
    const std::string flag = "--" + row.name;
    CLI::Option* option = std::visit(
        [&](auto member) -> CLI::Option* {
          auto& value = options.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            if (row.choices.empty()) return command.add_flag(flag, value, row.help);
            const std::string on = row.choices.at(0), off = row.choices.at(1);
            return command
                .add_option_function<std::string>(
                    flag, [&value, on](const std::string& word) { value = word == on; }, row.help)
                ->check(CLI::IsMember(row.choices))
                ->default_str(value ? on : off);
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            return command.add_option(flag, value, row.help)->delimiter(',');
          } else {
            CLI::Option* declared = command.add_option(flag, value, row.help);
            if constexpr (std::is_same_v<T, std::string>)
              if (!row.choices.empty()) declared->check(CLI::IsMember(row.choices));
            if constexpr (std::is_integral_v<T>)
              if (row.bounds_checked_when_parsed)
                // The row's help states the bounds: CLI11's own "INT:INT in [lo - hi]" is left out of it.
                declared->check(
                    CLI::Range(static_cast<T>(row.bounds.min), static_cast<T>(row.bounds.max)).description(""));
            return declared;
          }
        },
        row.member);
    if (!row.type_name.empty()) option->type_name(row.type_name);
  }
}

// The keys ("lambda", "checkpoint_every") of the options set on the command line.
inline std::set<std::string> given_options(const CLI::App& command) {
  std::set<std::string> given;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_lnames().empty()) continue;
    std::string name = option->get_lnames().front();
    for (char& c : name)
      if (c == '-') c = '_';
    given.insert(name);
  }
  return given;
}

// "--data, --val, ...": the options that --resume takes from the checkpoint when they are not given again.
template <class Options>
std::string saved_options_text(const OptionTable<Options>& table) {
  std::string text;
  for (const OptionRow<Options>& row : table.rows())
    if (row.saved()) text += (text.empty() ? "--" : ", --") + row.name;
  return text;
}

}  // namespace plexus::train

#pragma once
// `plexus-ae layers`: every layer type a model spec can name (the built-in
// layers and those of the --plugin files), with where it comes from, what it
// computes and the "params" it takes with their defaults.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/registry.h"

namespace plexus::ae {

struct LayersOptions {
  std::vector<std::string> plugins;
};

// The listing of every type of `registry`, sorted by name.
std::string layer_listing(const Registry& registry);

// Declares the subcommand on `app`; once parsed, it prints the listing and
// leaves its exit code in `exit_code`.
void add_layers_command(CLI::App& app, int& exit_code);

int run_layers(const LayersOptions& options);

}  // namespace plexus::ae

#pragma once
// The commands that describe without running: `plexus-ae layers` (below)
// and `plexus-ae summary SPEC`: the net a model spec builds for images of a
// given size, one row per node (type, output shape, parameters, forward
// FLOPs), then the totals; built on the CPU, never run.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus::ae {

// --patch's default side, a multiple of every bundled model's stride.
inline constexpr std::int64_t kDefaultSide = 256;

struct SummaryOptions {
  std::string spec;                                  // a bundled model's name or a JSON spec file
  std::string patch = std::to_string(kDefaultSide);  // S or HxW
  int batch = 1;
  std::vector<std::string> plugins;
};

struct ImageSize {
  std::int64_t height = 0;
  std::int64_t width = 0;
};

// --patch: "S" (S x S pixels) or "HxW", each side in [1, kMaxPatch].
// ConfigError naming the value otherwise.
ImageSize parse_patch(const std::string& text);

// The table of `net` (built for `batch` images): a row per node in
// execution order, then total parameters, FLOPs per image and per pixel,
// forward FLOPs of the batch and the memory of the activations.
std::string net_summary(Net& net, std::int64_t batch, const ImageSize& image);

// Declares the subcommand on `app`; once parsed, it prints the table and
// leaves its exit code in `exit_code`.
void add_summary_command(CLI::App& app, int& exit_code);

int run_summary(const SummaryOptions& options);

// `plexus-ae layers`: every layer type a model spec can name (the built-in
// layers and those of the --plugin files), with where it comes from, what it
// computes and the "params" it takes with their defaults.
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

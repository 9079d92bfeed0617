#pragma once
#include <CLI/CLI.hpp>

#include "options.h"

namespace plexus::ae {

// Declares the `eval` subcommand and its options on `app`; once parsed, it
// runs and leaves its exit code in `exit_code`.
void add_eval_command(CLI::App& app, int& exit_code);

// `plexus-ae eval`: every image of --data at full size through the model in
// eval mode; prints a table (name, size, PSNR, bpp) and the means to stdout;
// with --out, writes reconstructions as PNG and eval.json.
int run_eval(const EvalOptions& options);

}  // namespace plexus::ae

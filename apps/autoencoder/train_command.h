#pragma once
// `plexus-ae train`: its command line, and the run it starts (a single
// process, the launcher of --gpus N, or one of its workers).
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "options.h"
#include "plexus/train/worker_environment.h"
#include "train_options.h"

namespace plexus::ae {

// Declares the `train` subcommand and its options on `app`; once parsed, it
// runs and leaves its exit code in `exit_code`. `arguments`: this command
// line (argv[1..]), which the workers of --gpus N are started with.
void add_train_command(CLI::App& app, int& exit_code, std::vector<std::string> arguments);

// `plexus-ae train`. `given` holds the long names of the options set on the
// command line (on --resume, the others come from the checkpoint). With a
// `worker` environment, this process is one rank of a data-parallel run:
// it trains on its share of each batch, and rank 0 alone writes the
// output folder (checkpoints, model, metrics, messages).
// `table`: the options' table (train_options.h).
int run_train(TrainOptions options, const TrainOptionTable& table, const std::set<std::string>& given,
              const std::optional<train::WorkerEnvironment>& worker = std::nullopt);

// The default --out of a model: runs/<model name>.
std::string default_train_out(const std::string& model);

// `plexus-ae train --gpus N` (N >= 1): starts N workers running `arguments`
// (this command line, argv[1..]) and supervises them (plexus/train/worker_launch.h).
int launch_train_workers(TrainOptions options, const std::vector<std::string>& arguments);

}  // namespace plexus::ae

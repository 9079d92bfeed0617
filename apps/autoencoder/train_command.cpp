// `plexus-ae train`: its options, and the run: set up (training_run.h) and
// trained (train_loop.h), or the workers of --gpus N started and supervised.
#include "train_command.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "plexus/train/exit_codes.h"
#include "gpus_option.h"
#include "model_catalog.h"
#include "output_folder.h"
#include "plexus/distributed/mpi_communicator.h"
#include "plexus/error.h"
#include "plexus/train/option_table_cli.h"
#include "plexus/train/stop_signal.h"
#include "plexus/train/worker_launch.h"
#include "session.h"
#include "train_loop.h"
#include "training_run.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

std::string bundled_names_text() {
  std::string names;
  for (const auto& name : bundled_model_names()) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none found" : names;
}

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::max(1u, std::min(8u, cores > 1 ? cores - 1 : 1u)));
}

// The parsed command: a worker of a data-parallel run (started by --gpus N
// or another launcher), the launcher of --gpus N, or a single process.
int run_train_command(const TrainOptions& options, const TrainOptionTable& table, const std::set<std::string>& given,
                      const std::vector<std::string>& arguments) {
  use_cpu_threads(options.cpu_threads);
  if (const auto worker = train::worker_environment()) {
    try {
      return run_train(options, table, given, worker);
    } catch (const std::exception& e) {
      spdlog::error("rank {}: {}", worker->rank, e.what());
      // Under MPI the peers may wait in a collective for this rank: end them all.
      distributed::abort_mpi_job(train::kExitError);
      return train::kExitError;
    }
  }
  if (options.gpus > 0) return launch_train_workers(options, arguments);
  check_gpus_option(options);  // a negative --gpus
  return run_train(options, table, given);
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code, std::vector<std::string> arguments) {
  auto options = std::make_shared<TrainOptions>();
  options->threads = default_threads();
  auto table = std::make_shared<const TrainOptionTable>(train_option_table(bundled_names_text()));
  CLI::App* command = app.add_subcommand("train", "train a model on a folder of images");
  command->option_defaults()->always_capture_default();
  train::add_options(*command, *table, *options);
  command->footer("Bundled models: " + bundled_names_text() +
                  "\nExamples:\n"
                  "  plexus-ae train --data data/train-sample --val data/eval-sample --model bls2017 --steps 200 "
                  "--patch 64 --batch 4 --out runs/demo\n"
                  "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --lambda 0.0067 --steps 200000 "
                  "--batch 16 --out runs/bmshj\n"
                  "  plexus-ae train --out runs/demo --resume            # continue after Ctrl-C, same settings\n"
                  "  plexus-ae train --data imgs --model my_model.json --plugin ./libmylayer.so\n"
                  "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --batch 16 --gpus 4 --out "
                  "runs/bmshj4   # 64 patches per step\n"
                  "Ctrl-C saves a checkpoint and exits (130); a NaN/Inf loss stops with exit code 1 and keeps the last "
                  "good checkpoint.\n"
                  "--resume takes these from the checkpoint unless given again: " +
                  train::saved_options_text(*table) + ".");
  command->callback([command, options, table, arguments = std::move(arguments), &exit_code] {
    exit_code = run_train_command(*options, *table, train::given_options(*command), arguments);
  });
}

std::string default_train_out(const std::string& model) { return "runs/" + fs::path(model).stem().string(); }

int launch_train_workers(TrainOptions o, const std::vector<std::string>& arguments) {
  check_gpus_option(o);
  if (o.out.empty()) o.out = default_train_out(o.model);
  create_output_folder(o.out);
  std::error_code error;
  const fs::path self = executable_path(error);
  if (error) throw IoError("cannot find this executable to start the workers (/proc/self/exe): " + error.message());
  std::vector<std::string> command{self.string()};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const std::string rendezvous = (fs::path(o.out) / (".rendezvous-" + std::to_string(getpid()))).string();
  return train::supervise_workers(command, o.gpus, rendezvous);
}

int run_train(TrainOptions options, const TrainOptionTable& table, const std::set<std::string>& given,
              const std::optional<train::WorkerEnvironment>& worker) {
  if (options.out.empty()) options.out = default_train_out(options.model);
  // Rank 0 writes the output folder and reports; the other ranks only train.
  const bool root = !worker || worker->rank == 0;
  if (!root) spdlog::set_level(spdlog::level::warn);
  if (root) prepare_train_output(options);
  const Registry registry = make_registry(options.plugins);
  const TrainSettings settings = resolve_train_settings(std::move(options), table, given, registry, worker);
  TrainingImages images(settings.options);
  if (root) create_output_folder(settings.options.out);

  TrainingRun run(settings, table, registry, images, root, given, worker);
  run.log_start();
  if (run.step >= settings.options.steps) {
    if (!root) return train::kExitOk;
    run.write_model();
    spdlog::info("the checkpoint is already at step {} of --steps {}; wrote {}", run.step, settings.options.steps,
                 settings.model_path);
    return train::kExitOk;
  }
  // Before the metrics log exists: once a run shows that it has started, a
  // Ctrl-C must save and stop it, never kill it.
  train::install_stop_handlers();
  TrainLoop loop(run);
  return loop.train();
}

}  // namespace plexus::ae

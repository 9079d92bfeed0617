// `plexus-ae train`: sets up a run (training_run.h) and trains it
// (train_loop.h), or starts and supervises the workers of --gpus N.
#include "train_command.h"

#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "data_parallel.h"
#include "output_folder.h"
#include "plexus/error.h"
#include "session.h"
#include "stop_signal.h"
#include "train_loop.h"
#include "training_run.h"

namespace plexus::ae {

namespace fs = std::filesystem;

std::string default_train_out(const std::string& model) { return "runs/" + fs::path(model).stem().string(); }

int launch_train_workers(TrainOptions o, const std::vector<std::string>& arguments) {
  check_gpus_option(o);
  if (o.out.empty()) o.out = default_train_out(o.model);
  create_output_folder(o.out);
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw IoError("cannot find this executable to start the workers (/proc/self/exe): " + error.message());
  std::vector<std::string> command{self.string()};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const std::string rendezvous = (fs::path(o.out) / (".rendezvous-" + std::to_string(getpid()))).string();
  return supervise_workers(command, o.gpus, rendezvous);
}

int run_train(TrainOptions options, const std::set<std::string>& given,
              const std::optional<WorkerEnvironment>& worker) {
  if (options.out.empty()) options.out = default_train_out(options.model);
  // Rank 0 writes the output folder and reports; the other ranks only train.
  const bool root = !worker || worker->rank == 0;
  if (!root) spdlog::set_level(spdlog::level::warn);
  if (root) prepare_train_output(options);
  const Registry registry = make_registry(options.plugins);
  const TrainSettings settings = resolve_train_settings(std::move(options), given, registry, worker);
  TrainingImages images(settings.options);
  if (root) create_output_folder(settings.options.out);

  TrainingRun run(settings, registry, images, root, given, worker);
  run.log_start();
  if (run.step >= settings.options.steps) {
    if (!root) return kExitOk;
    run.write_model();
    spdlog::info("the checkpoint is already at step {} of --steps {}; wrote {}", run.step, settings.options.steps,
                 settings.model_path);
    return kExitOk;
  }
  // Before the metrics log exists: once a run shows that it has started, a
  // Ctrl-C must save and stop it, never kill it.
  install_stop_handlers();
  TrainLoop loop(run);
  return loop.train();
}

}  // namespace plexus::ae

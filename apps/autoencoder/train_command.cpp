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

#include "data_parallel.h"
#include "executable_path.h"
#include "exit_codes.h"
#include "model_catalog.h"
#include "output_folder.h"
#include "plexus/error.h"
#include "precision_option.h"
#include "session.h"
#include "stop_signal.h"
#include "train_loop.h"
#include "training_run.h"
#include "worker_launch.h"

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

void add_train_options(CLI::App& train, TrainOptions& o) {
  train.add_option("--data", o.data, "folder of training images, PNG/JPEG, searched recursively (required; on --resume taken from the checkpoint)")->type_name("DIR");
  train.add_option("--val", o.val, "folder of validation images, evaluated at full size every --val-every steps and at the end")->type_name("DIR");
  train.add_option("--model", o.model, "a bundled model (" + bundled_names_text() + ") or a JSON model spec file")->type_name("NAME|FILE");
  train.add_option("--lambda", o.lambda, "rate-distortion trade-off: loss = lambda * 255^2 * MSE + bpp");
  train.add_option("--lambdas", o.lambdas,
                   "a variable-rate model's trade-offs, one per rate level, increasing (e.g. "
                   "0.0018,0.0035,0.0067,0.013,0.025,0.0483): each patch trains at a level drawn at random, with "
                   "its lambda")
      ->delimiter(',')
      ->type_name("L0,L1,...");
  train.add_option("--steps", o.steps, "total optimisation steps (a resumed run continues up to this)");
  train.add_option("--batch", o.batch, "patches per step");
  train.add_option("--patch", o.patch, "patch side in pixels; a multiple of the model's stride (16 for the bundled models)");
  train.add_option("--lr", o.lr, "Adam learning rate");
  train.add_option("--device", o.device, "cpu, cuda, cuda:N or auto (CUDA when a GPU is visible)")->type_name("DEVICE");
  train.add_option("--seed", o.seed, "seed of the initial weights, the patches and the noise");
  train.add_option("--out", o.out, "output folder: checkpoint.safetensors, model.safetensors, metrics.jsonl (default: runs/<model name>)")->type_name("DIR");
  train.add_option("--init-from", o.init_from, "start from the weights of this model or checkpoint: every parameter of the same name and shape is copied (the others keep their initial values and are listed); not with --resume")->type_name("FILE");
  train.add_flag("--resume", o.resume, "continue from <out>/checkpoint.safetensors with its optimiser state and settings");
  train.add_option("--checkpoint-every", o.checkpoint_every, "save <out>/checkpoint.safetensors every this many steps (0: only at the end)");
  train.add_option("--log-every", o.log_every, "append a line to <out>/metrics.jsonl (and, off a terminal, to stderr) every this many steps");
  train.add_option("--val-every", o.val_every, "validate on --val every this many steps");
  train.add_option("--val-images", o.val_images, "validate on at most this many images of --val (0: all)");
  train.add_option("--plugin", o.plugins, "a layer plugin .so to load (repeatable; PLEXUS_PLUGIN_PATH is also read)")->type_name("FILE");
  train.add_option("--threads", o.threads, "background threads decoding and cropping images (default: CPU cores - 1, at most 8; 0: decode in the training thread)");
  train.add_option("--cpu-threads", o.cpu_threads, "threads the CPU kernels use (0: every core); results are the same for any count");
  train.add_option("--time-limit", o.time_limit, "finish (final validation, checkpoint and model) after this many seconds of training, even before --steps; 0: no limit");
  train.add_flag("--overwrite", o.overwrite, "start a new run in an --out that holds the model and metrics of an earlier one, replacing them");
  train.add_option("--max-image-pixels", o.max_image_pixels, "skip (with a warning) images of more pixels than this, read from the header before decoding")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  train.add_option("--clip-grad-norm", o.clip_grad_norm, "scale the gradients down when their global 2-norm exceeds this (0: no clipping)");
  train.add_option("--lr-schedule", o.lr_schedule, "none; step (--lr-decay every --lr-step-every steps); plateau (--lr-decay after --lr-patience validations on --val without a lower loss); final (--lr-decay once, for the last --lr-final-fraction of --steps or of --time-limit, whichever comes first)")->type_name("KIND");
  train.add_option("--lr-decay", o.lr_decay, "factor the learning rate is multiplied by at each decay, in (0, 1)");
  train.add_option("--lr-step-every", o.lr_step_every, "step schedule: decay every this many steps");
  train.add_option("--lr-patience", o.lr_patience, "plateau schedule: validations without a lower validation loss before a decay");
  train.add_option("--lr-final-fraction", o.lr_final_fraction, "final schedule: the fraction of the run, at its end, trained at --lr * --lr-decay");
  train.add_option("--min-lr", o.min_lr, "the schedule never goes below this learning rate");
  train.add_option_function<std::string>(
           "--cuda-graph", [&o](const std::string& value) { o.cuda_graph = value == "on"; },
           "on: record the CUDA training step once into a CUDA graph and replay it (one launch per step; layers "
           "that do not declare themselves capturable fall back to eager launches, said once in the log); off: "
           "launch every kernel eagerly")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on")
      ->type_name("on|off");
  train.add_option("--precision", o.precision, kTrainPrecisionHelp)->check(CLI::IsMember({"f32", "tf32", "bf16"}));
  train.add_option("--gpus", o.gpus, "data-parallel training on N GPUs (cuda:0 to cuda:N-1; NCCL): N worker processes, each with --batch patches of every step, so a step sees N * --batch patches, the same ones as --batch N*B on one GPU; 0: this process alone. --gpus 1 --device cpu runs the data-parallel path on the CPU");
  train.add_option("--rank-timeout", o.rank_timeout, "with --gpus: seconds a worker waits for the others (joining, gradient all-reduce) before it fails, so a worker that died stops the run instead of hanging it");
  train.add_option("--gradient-bucket-mb", o.gradient_bucket_mb, "with --gpus: MiB of gradients per all-reduce; each bucket is reduced while backward computes the earlier layers' gradients, so smaller buckets overlap more of the communication, at the cost of more, smaller reductions")
      ->capture_default_str();
  train.add_option("--replica-check-every", o.replica_check_every, "with --gpus: compare a fingerprint of the parameters across workers every this many steps and stop if they differ (0: only at the end)");
  train.add_flag("--tf32", o.tf32, "deprecated: the same as --precision tf32");
}

// The long names ("lambda", "checkpoint_every") of options set on the command line.
std::set<std::string> given_options(const CLI::App& command) {
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

// The parsed command: a worker of a data-parallel run (started by --gpus N
// or another launcher), the launcher of --gpus N, or a single process.
int train(const TrainOptions& options, const std::set<std::string>& given, const std::vector<std::string>& arguments) {
  use_cpu_threads(options.cpu_threads);
  if (const auto worker = worker_environment()) {
    try {
      return run_train(options, given, worker);
    } catch (const std::exception& e) {
      spdlog::error("rank {}: {}", worker->rank, e.what());
      return kExitError;
    }
  }
  if (options.gpus > 0) return launch_train_workers(options, arguments);
  check_gpus_option(options);  // a negative --gpus
  return run_train(options, given);
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code, std::vector<std::string> arguments) {
  auto options = std::make_shared<TrainOptions>();
  options->threads = default_threads();
  CLI::App* command = app.add_subcommand("train", "train a model on a folder of images");
  command->option_defaults()->always_capture_default();
  add_train_options(*command, *options);
  command->footer(
      "Bundled models: " + bundled_names_text() +
      "\nExamples:\n"
      "  plexus-ae train --data data/train-sample --val data/eval-sample --model bls2017 --steps 200 --patch 64 --batch 4 --out runs/demo\n"
      "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --lambda 0.0067 --steps 200000 --batch 16 --out runs/bmshj\n"
      "  plexus-ae train --out runs/demo --resume            # continue after Ctrl-C, same settings\n"
      "  plexus-ae train --data imgs --model my_model.json --plugin ./libmylayer.so\n"
      "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --batch 16 --gpus 4 --out runs/bmshj4   # 64 patches per step\n"
      "Ctrl-C saves a checkpoint and exits (130); a NaN/Inf loss stops with exit code 1 and keeps the last good checkpoint.");
  command->callback([command, options, arguments = std::move(arguments), &exit_code] {
    exit_code = train(*options, given_options(*command), arguments);
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

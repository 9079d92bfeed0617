// plexus-ae: train and evaluate learned image-compression autoencoders.
// Every error ends in one message on stderr and exit code 1.
#include <exception>
#include <new>
#include <set>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "compress_command.h"
#include "cli_suggestions.h"
#include "console.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"
#include "eval_command.h"
#include "precision_option.h"
#include "model_catalog.h"
#include "options.h"
#include "train_command.h"
#include "data_parallel.h"

namespace {

using plexus::ae::EvalOptions;
using plexus::ae::TrainOptions;
using plexus::ae::kEvalPrecisionHelp;
using plexus::ae::kTrainPrecisionHelp;

std::string bundled_names_text() {
  std::string names;
  for (const auto& name : plexus::ae::bundled_model_names()) names += (names.empty() ? "" : ", ") + name;
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
  train.add_option("--replica-check-every", o.replica_check_every, "with --gpus: compare a fingerprint of the parameters across workers every this many steps and stop if they differ (0: only at the end)");
  train.add_flag("--tf32", o.tf32, "deprecated: the same as --precision tf32");
}

void add_eval_options(CLI::App& eval, EvalOptions& o) {
  eval.add_option("--model", o.model, "model.safetensors or checkpoint.safetensors written by plexus-ae train (it carries its model spec)")->required()->type_name("FILE");
  eval.add_option("--data", o.data, "folder of images to evaluate at full size, PNG/JPEG, searched recursively")->required()->type_name("DIR");
  eval.add_option("--out", o.out, "write reconstructions as PNG and eval.json here")->type_name("DIR");
  eval.add_option("--device", o.device, "cpu, cuda, cuda:N or auto")->type_name("DEVICE");
  eval.add_option("--plugin", o.plugins, "a layer plugin .so the model needs (repeatable; PLEXUS_PLUGIN_PATH is also read)")->type_name("FILE");
  eval.add_option("--max-image-pixels", o.max_image_pixels, "skip (with a warning) images of more pixels than this, read from the header before decoding")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  eval.add_option("--cpu-threads", o.cpu_threads, "threads the CPU kernels use (0: every core)");
  eval.add_option("--precision", o.precision, kEvalPrecisionHelp)->check(CLI::IsMember({"f32", "tf32", "bf16"}));
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

}  // namespace

int main(int argc, char** argv) {
  plexus::ae::configure_logging();
  TrainOptions train_options;
  train_options.threads = default_threads();
  EvalOptions eval_options;

  CLI::App app{"plexus-ae: train and evaluate learned image-compression autoencoders (Plexus)."};
  app.name("plexus-ae");
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "plexus-ae 0.1.0");
  app.option_defaults()->always_capture_default();
  app.footer(
      "Examples:\n"
      "  plexus-ae train --data data/train-sample --model bls2017 --steps 200 --patch 64 --out runs/demo\n"
      "  plexus-ae train --out runs/demo --resume --steps 400\n"
      "  plexus-ae eval --model runs/demo/model.safetensors --data data/eval-sample --out runs/demo/recon\n"
      "  plexus-ae compress --model runs/demo/model.safetensors photo.png        # writes photo.pxae\n"
      "  plexus-ae decompress --model runs/demo/model.safetensors photo.pxae -o decoded.png\n"
      "Run 'plexus-ae <command> --help' for every option of a command.");

  CLI::App* train = app.add_subcommand("train", "train a model on a folder of images");
  train->option_defaults()->always_capture_default();
  add_train_options(*train, train_options);
  train->footer(
      "Bundled models: " + bundled_names_text() +
      "\nExamples:\n"
      "  plexus-ae train --data data/train-sample --val data/eval-sample --model bls2017 --steps 200 --patch 64 --batch 4 --out runs/demo\n"
      "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --lambda 0.0067 --steps 200000 --batch 16 --out runs/bmshj\n"
      "  plexus-ae train --out runs/demo --resume            # continue after Ctrl-C, same settings\n"
      "  plexus-ae train --data imgs --model my_model.json --plugin ./libmylayer.so\n"
      "  plexus-ae train --data ~/bsds500 --model bmshj2018-factorized --batch 16 --gpus 4 --out runs/bmshj4   # 64 patches per step\n"
      "Ctrl-C saves a checkpoint and exits (130); a NaN/Inf loss stops with exit code 1 and keeps the last good checkpoint.");

  CLI::App* eval = app.add_subcommand("eval", "evaluate a trained model: PSNR and bits per pixel per image");
  eval->option_defaults()->always_capture_default();
  add_eval_options(*eval, eval_options);
  eval->footer(
      "Examples:\n"
      "  plexus-ae eval --model runs/demo/model.safetensors --data data/eval-sample\n"
      "  plexus-ae eval --model runs/demo/checkpoint.safetensors --data kodak --out recon --device cpu\n"
      "Images are padded (edge pixels repeated) to a multiple of the model's stride and cropped back;\n"
      "bpp is the entropy model's estimate for the rounded latent, divided by the original pixel count.");

  plexus::ae::CodecCommands codec(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {  // not --help or --version: first look for a misspelt name
      if (auto message = plexus::ae::diagnose_unknown_names(app, std::vector<std::string>(argv + 1, argv + argc))) {
        spdlog::error("{}", *message);
        return plexus::ae::kExitError;
      }
    }
    const int code = app.exit(e);  // prints help, version or the parse error
    return code == 0 ? 0 : plexus::ae::kExitError;
  }

  try {
    const int cpu_threads = train->parsed() ? train_options.cpu_threads : eval_options.cpu_threads;
    if (cpu_threads < 0) throw plexus::ConfigError("--cpu-threads must be >= 0 (0: every core), got " + std::to_string(cpu_threads));
    plexus::set_cpu_threads(cpu_threads);
    if (train->parsed()) {
      // A worker of a data-parallel run (started by --gpus N or another launcher).
      if (const auto worker = plexus::ae::worker_environment()) {
        try {
          return plexus::ae::run_train(train_options, given_options(*train), worker);
        } catch (const std::exception& e) {
          spdlog::error("rank {}: {}", worker->rank, e.what());
          return plexus::ae::kExitError;
        }
      }
      if (train_options.gpus > 0)
        return plexus::ae::launch_train_workers(train_options, std::vector<std::string>(argv + 1, argv + argc));
      plexus::ae::check_gpus_option(train_options);  // a negative --gpus
      return plexus::ae::run_train(train_options, given_options(*train));
    }
    if (codec.parsed()) return codec.run();
    return plexus::ae::run_eval(eval_options);
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory (try a smaller --batch or --patch, or a smaller model)");
    return plexus::ae::kExitError;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return plexus::ae::kExitError;
  }
}

#pragma once
// What `plexus-ae train` sets up before its first step (TrainLoop,
// train_loop.h, takes the steps): the settings, the images, the net with its
// optimiser and learning-rate schedule, the data-parallel rank and the clock.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "options.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/context.h"
#include "plexus/data/image_folder.h"
#include "plexus/grad_clip.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"
#include "plexus/train/data_parallel.h"
#include "plexus/train/lr_schedule.h"
#include "plexus/train/run_metadata.h"
#include "plexus/train/worker_environment.h"
#include "train_options.h"

namespace plexus::ae {

// The settings of a run: the command line's or, on --resume, the
// checkpoint's for every option not given again; checked.
struct TrainSettings {
  TrainOptions options;
  ModelSpec spec;              // the model, as its checkpoints record it
  codec::TrainingLoss loss;    // the spec's "loss" section (codec::training_loss())
  train::RunProgress earlier;  // what the checkpoint kept of the earlier runs of this --out
  int stride = 0;
  int rate_levels = 0;  // a variable-rate model's (codec::rate_levels()); 0: a model of one rate
  Device device;
  Precision precision = Precision::f32;
  std::string checkpoint_path;  // <out>/checkpoint.safetensors
  std::string model_path;       // <out>/model.safetensors
  // The spec's name, else where it came from.
  std::string model_name() const;
  // The trade-off weighting the distortion in the loss: --lambda, or the mean of --lambdas.
  double loss_lambda() const;
};

// `options.out` must be set. Reads the checkpoint on --resume; throws
// ConfigError or IoError saying what to change.
TrainSettings resolve_train_settings(TrainOptions options, const TrainOptionTable& table,
                                     const std::set<std::string>& given, const Registry& registry,
                                     const std::optional<train::WorkerEnvironment>& worker);

// The training images and, with --val, the validation images.
struct TrainingImages {
  explicit TrainingImages(const TrainOptions& options);
  data::ImageFolder train;
  std::unique_ptr<data::ImageFolder> validation;
};

// The net and everything its steps change, ready for the step `step`: new,
// started from --init-from, or restored from the checkpoint on --resume; a
// data-parallel worker has joined the other ranks and holds rank 0's
// parameters. `root`: rank 0 or a single process, the one that writes the
// output folder and reports.
struct TrainingRun {
  TrainingRun(const TrainSettings& settings, const TrainOptionTable& table, const Registry& registry,
              TrainingImages& images, bool root, const std::set<std::string>& given,
              const std::optional<train::WorkerEnvironment>& worker);

  int world_size() const { return parallel ? parallel->world_size() : 1; }
  // Training seconds of every run of this --out: the earlier runs' and this one's.
  double elapsed_seconds() const;
  // What a checkpoint keeps besides the step and the optimiser: the settings
  // and the progress (plexus/train/run_metadata.h).
  std::map<std::string, std::string> checkpoint_metadata() const;
  // The "training <model> ..." message that opens the run, and (rank 0) a
  // warning when compress and export could not code the trained model.
  void log_start() const;
  // model.safetensors: the parameters without the optimiser, and the coding tables.
  void write_model();
  // The rate level validation measures a variable-rate model at: the middle one.
  double validation_level() const { return settings.rate_levels > 0 ? (settings.rate_levels - 1) / 2.0 : 0.0; }

  const TrainSettings& settings;
  const Registry& registry;
  TrainingImages& images;
  const bool root;
  Context ctx;
  const Shape training_shape;  // {--batch, 3, --patch, --patch}
  Net net;
  Adam adam;
  train::LrSchedule schedule;
  std::unique_ptr<GradientClipper> clipper;           // null: --clip-grad-norm 0
  std::int64_t step = 0;                              // steps taken, by every run of this --out
  std::unique_ptr<train::DataParallelRank> parallel;  // null: a single process
  const double lambda;                                // of the distortion in the loss: settings.loss_lambda()
  const std::string settings_text;                    // train_settings() as JSON text
  double best_val_psnr;                               // NaN: no validation yet
  std::chrono::steady_clock::time_point start;        // of this run's training
};

}  // namespace plexus::ae

#pragma once
// What `plexus-ae train` adds to the trainer's loop (plexus/train/trainer.h),
// which takes the steps of a TrainingRun (training_run.h) up to --steps or
// --time-limit: the patches of its images, the loss of the spec's "loss"
// section (lambda * 255^2 * mse + bpp by default), the progress line,
// <out>/metrics.jsonl, validation on --val (PSNR, MS-SSIM and bpp of whole
// images), what its checkpoints hold, and its messages.
//
// Batch k (0-based) comes from PatchSampler(seed) at step k. Data-parallel
// (a worker of --gpus N, plexus/train/worker_launch.h): rank r takes crops
// [r B, (r + 1) B) of the global batch of step k, so the data sequence is
// the same for any number of ranks; rank 0 alone writes and reports.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "console.h"
#include "metrics_log.h"
#include "plexus/data/batch_loader.h"
#include "plexus/train/trainer.h"
#include "train_progress.h"
#include "training_run.h"

namespace plexus::ae {

// The terms a step records, of which the loss is
//   sum_k weight_k * blob_k + offset:
// "mse" (lambda * 255^2 times its distortion weight; 0: recorded for the
// log only), "bpp" (its rate weight, or 0), any other rate blob of the loss,
// and "ms_ssim" (-lambda times its distortion weight) where the loss has it;
// offset = lambda * (the ms_ssim weight), the 1 of 1 - MS-SSIM.
struct LossTerms {
  train::StepLoss step;
  std::size_t mse = 0, bpp = 1;
  std::optional<std::size_t> ms_ssim;
  double offset = 0;
};
LossTerms loss_terms(const codec::TrainingLoss& loss, double lambda);

class TrainLoop : public train::TrainerCommand {
 public:
  // Opens <out>/metrics.jsonl (rank 0) and starts the loader at `run.step`.
  explicit TrainLoop(TrainingRun& run);
  // Trains, then saves the checkpoint and the model. Returns the exit code:
  // kExitError on divergence (the last good checkpoint is kept),
  // kExitInterrupted after a stop signal (the checkpoint saved).
  int train();

  void end_line() override;
  void on_step_values(const train::TrainingWindow& now) override;
  void on_pace(std::int64_t step, double seconds_per_step) override;
  void on_log(const train::TrainingWindow& window, double seconds, double loader_wait_seconds) override;
  void after_step() override;
  bool validates() const override;
  // Validates on --val; returns the loss the schedule observes.
  double validate() override;
  void write_checkpoint() override;
  std::string checkpoint_path() const override;
  void on_diverged(const train::Divergence& divergence, const std::string& kept) override;
  void on_stopped(int signal_number) override;
  void on_finished() override;

 private:
  TrainingRun& run_;
  const TrainOptions& o_;
  std::unique_ptr<MetricsLog> log_;  // rank 0 only
  data::BatchLoader loader_;
  ProgressBar bar_;
  LossTerms terms_;
  train::Trainer trainer_;
  // For a loss without an ms_ssim term, on patches of codec::kMsSsimMinSide or
  // more: an MSSSIM layer measuring the last step's x_hat against its image
  // when a line is logged (every step would slow the steps down); null
  // otherwise. Its f32 inputs and output on the run's device.
  std::unique_ptr<Layer> ms_ssim_monitor_;
  Tensor monitor_x_hat_, monitor_image_, monitor_value_;
  double last_batch_ms_ssim();
  SmoothedStats smoothed_;  // what the progress line shows
  StepStats stats_;
};

}  // namespace plexus::ae

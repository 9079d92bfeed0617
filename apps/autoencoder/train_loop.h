#pragma once
// The training loop of `plexus-ae train`: takes the steps of a TrainingRun
// (training_run.h) up to --steps or --time-limit, and after each one logs a
// window, validates, saves a checkpoint or stops on a signal when due.
//
// Reproducibility: batch k (0-based) comes from PatchSampler(seed) at step
// k, and the noise of step k from a Context reseeded with
// mix_seed(seed, k, 1). Neither depends on what ran before, so a run resumed
// from a checkpoint at step k (parameters, Adam moments and step count
// restored) takes exactly the steps an uninterrupted run takes.
//
// Data-parallel (a worker of --gpus N, plexus/train/worker_launch.h): rank r takes crops
// [r B, (r + 1) B) of the global batch of step k, so the data sequence is
// the same for any number of ranks; rank 0 alone writes and reports.
//
// The steps themselves (train::TrainingStep) are enqueued without waiting for the
// GPU: the loss is read back once per log line, and divergence is looked up
// in a device-side record at log, validation, checkpoint and stop points
// (every step on the CPU, where it is free).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "console.h"
#include "metrics_log.h"
#include "plexus/data/batch_loader.h"
#include "plexus/distributed/agreement.h"
#include "plexus/train/training_step.h"
#include "train_progress.h"
#include "training_run.h"

namespace plexus::ae {

class TrainLoop {
 public:
  // Opens <out>/metrics.jsonl (rank 0) and starts the loader at `run.step`.
  explicit TrainLoop(TrainingRun& run);
  // Trains, then saves the checkpoint and the model. Returns the exit code:
  // kExitError on divergence (the last good checkpoint is kept),
  // kExitInterrupted after a stop signal (the checkpoint saved).
  int train();

 private:
  // Enqueues the next step; every step on the CPU, also checks it for
  // divergence and updates the progress line's values. False: diverged.
  bool take_step();
  // --time-limit: makes this step the last one once it is reached.
  void check_time_limit();
  // The pace (images per second, time left) of the progress line.
  void update_pace(std::chrono::steady_clock::time_point step_start);
  // True every `every` steps and at the last step.
  bool due(std::int64_t every) const;
  // A line of <out>/metrics.jsonl for the steps since the last one. False: diverged.
  bool log_window();
  // Validates on --val and lets the schedule observe the loss. False: diverged.
  bool validate();
  // Reports a divergence, when there is one.
  bool diverged(const std::optional<train::Divergence>& divergence);
  // What a diverged run leaves: the last good checkpoint, or none.
  std::string last_good_checkpoint_text() const;
  // <out>/checkpoint.safetensors, unless training diverged. `why` names it in
  // the message when it is not saved. False: diverged.
  bool save_checkpoint(const char* why);
  // The signal that stops the run after this step (0: another rank's), if any.
  std::optional<int> stop_signal();
  int stop(int signal_number);
  int finish();
  bool out_of_time() const;
  // The clock the learning-rate schedule reads (rank 0's in a data-parallel run).
  double schedule_seconds() const;

  TrainingRun& run_;
  const TrainOptions& o_;
  std::unique_ptr<MetricsLog> log_;  // rank 0 only
  data::BatchLoader loader_;
  ProgressBar bar_;
  train::TrainingStep training_;
  std::int64_t last_good_checkpoint_;  // -1: none saved yet
  const std::int64_t first_step_;
  std::int64_t next_agreement_step_;
  std::int64_t last_step_;  // --steps, or the step at which --time-limit was reached
  // Data-parallel ranks decide alike: on rank 0's clock and on a stop
  // requested on any rank, agreed after step next_agreement_step_ (rank 0
  // sets the interval, DataParallelRank::agree).
  distributed::Agreement agreed_;

  // Window statistics between two log lines.
  std::chrono::steady_clock::time_point window_start_;
  double window_start_loader_wait_ = 0;  // training_.seconds_waiting_for_loader() then
  double seconds_per_step_ = 0;          // exponential moving average
  SmoothedStats smoothed_;               // what the progress line shows
  StepStats stats_;
};

}  // namespace plexus::ae

#pragma once
// The training loop: takes the steps of a run up to --steps or
// --time-limit and, after each one, when due: logs a window, validates
// (the schedule observes the loss), checks the data-parallel replicas,
// saves a checkpoint, or stops on a signal. What is the command's (its
// log, its validation, its messages, what a checkpoint holds) it asks of a
// TrainerCommand.
//
// Reproducibility: batch k (0-based) comes from the loader at step k, and
// the noise of step k from a Context reseeded with mix_seed(seed, k, 1)
// (TrainingStep). Neither depends on what ran before, so a run resumed from
// a checkpoint at step k (parameters, optimiser state and step count
// restored) takes exactly the steps an uninterrupted run takes.
//
// Data-parallel (a worker of a supervised job, worker_launch.h): the ranks
// decide alike, on rank 0's clock and on a stop requested on any rank,
// agreed after the steps DataParallelRank::agree sets; rank 0 alone writes.
//
// The steps are enqueued without waiting for the GPU: the loss is read back
// once per log window, and divergence is looked up in a device-side record
// at log, validation, checkpoint and stop points (every step on the CPU,
// where it is free).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "plexus/context.h"
#include "plexus/data/batch_loader.h"
#include "plexus/distributed/agreement.h"
#include "plexus/grad_clip.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/train/data_parallel.h"
#include "plexus/train/lr_schedule.h"
#include "plexus/train/trainer_options.h"
#include "plexus/train/training_step.h"

namespace plexus::train {

// What a training command adds to the loop. Every call but write_checkpoint
// happens on every rank; the command decides what rank 0 alone does.
class TrainerCommand {
 public:
  virtual ~TrainerCommand() = default;
  // Ends a progress line before a message.
  virtual void end_line() {}
  // The values of the step just taken, where reading them is free (every step on the CPU).
  virtual void on_step_values(const TrainingWindow& /*now*/) {}
  // After step `step` (counted from 1): the pace, a moving average of seconds per step.
  virtual void on_pace(std::int64_t /*step*/, double /*seconds_per_step*/) {}
  // Every --log-every steps and at the last: the means since the last call, over
  // `seconds`, of which the loader kept the step waiting `loader_wait_seconds`.
  virtual void on_log(const TrainingWindow& /*window*/, double /*seconds*/, double /*loader_wait_seconds*/) {}
  // After every step, after on_log.
  virtual void after_step() {}
  // Whether the run validates (every --val-every steps and at the last); then
  // the validation's loss, which the learning-rate schedule observes.
  virtual bool validates() const { return false; }
  virtual double validate() { return 0; }
  // Rank 0: writes the checkpoint, at checkpoint_path().
  virtual void write_checkpoint() = 0;
  virtual std::string checkpoint_path() const = 0;
  // The loss is not finite: says so (the run then ends, kExitError). `kept`
  // says which checkpoint is kept ("No checkpoint had been saved yet.").
  virtual void on_diverged(const Divergence& divergence, const std::string& kept) = 0;
  // A stop signal ended the run after the checkpoint was saved.
  virtual void on_stopped(int /*signal_number*/) {}
  // The last step is taken and the final checkpoint saved (the model, a summary).
  virtual void on_finished() {}
};

// A run's pieces, set up by the command; they outlive the Trainer.
struct TrainerParts {
  Net& net;
  Optimizer& optimizer;
  Context& ctx;
  LrSchedule& schedule;
  GradientClipper* clipper = nullptr;           // null: no clipping
  DataParallelRank* parallel = nullptr;         // null: a single process
  bool root = true;                             // rank 0 or a single process: writes the checkpoints
  std::int64_t& step;                           // steps taken, by every run of this output; advanced by the loop
  std::chrono::steady_clock::time_point start;  // of this run's training
  bool resumed = false;                         // the run started from its checkpoint, at `step`
};

class Trainer {
 public:
  // Starts the step (TrainingStep) on `loader`, which the caller started at `parts.step`.
  Trainer(const TrainerParts& parts, data::BatchLoader& loader, const StepLoss& loss, const TrainerOptions& options,
          TrainerCommand& command);
  TrainingStep& training_step() { return training_; }

  // Trains, then saves the final checkpoint. Returns the exit code:
  // kExitError on divergence (the last good checkpoint is kept),
  // kExitInterrupted after a stop signal (the checkpoint saved).
  int train();

  // The clock the learning-rate schedule reads (rank 0's in a data-parallel run).
  double schedule_seconds() const;

 private:
  // Enqueues the next step; every step on the CPU, also checks it for divergence. False: diverged.
  bool take_step();
  // --time-limit: makes this step the last one once it is reached.
  void check_time_limit();
  void update_pace(std::chrono::steady_clock::time_point step_start);
  // True every `every` steps and at the last step.
  bool due(std::int64_t every) const;
  bool log_window();
  bool validate();
  bool diverged(const std::optional<Divergence>& divergence);
  std::string last_good_checkpoint_text() const;
  // The checkpoint, unless training diverged; `why` names it when it is not saved. False: diverged.
  bool save_checkpoint(const char* why);
  // The signal that stops the run after this step (0: another rank's), if any.
  std::optional<int> stop_signal();
  int stop(int signal_number);
  int finish();
  bool out_of_time() const;

  TrainerParts parts_;
  const TrainerOptions& o_;
  TrainerCommand& command_;
  TrainingStep training_;
  std::int64_t last_good_checkpoint_;  // -1: none saved yet
  const std::int64_t first_step_;
  std::int64_t next_agreement_step_;
  std::int64_t last_step_;  // --steps, or the step at which --time-limit was reached
  distributed::Agreement agreed_;
  std::chrono::steady_clock::time_point window_start_;
  double window_start_loader_wait_ = 0;  // training_.seconds_waiting_for_loader() then
  double seconds_per_step_ = 0;          // exponential moving average
};

}  // namespace plexus::train

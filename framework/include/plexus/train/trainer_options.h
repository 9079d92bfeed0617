#pragma once
// The options of the trainer itself, common to every training command:
// the steps and their batch, the optimiser's rate and its schedule, the
// gradient clipping, the CUDA graph, the cadence of logs, validations and
// checkpoints, the time limit and the data-parallel workers. A command's
// options struct derives from TrainerOptions and adds the trainer's rows to
// its table (add_trainer_options) among its own.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "plexus/checked_math.h"
#include "plexus/train/data_parallel.h"
#include "plexus/train/option_table.h"

namespace plexus::train {

// Upper limit of --batch (also applied to saved settings).
inline constexpr int kMaxBatch = 65536;
// The name of --lr, which a resumed run reads (a new --lr restarts the schedule from it).
inline constexpr const char* kLrOption = "lr";

struct TrainerOptions {
  std::int64_t steps = 100000;
  int batch = 8;
  double lr = 1e-4;
  std::uint64_t seed = 1;
  std::int64_t checkpoint_every = 1000;
  std::int64_t log_every = 100;
  std::int64_t val_every = 5000;
  bool cuda_graph = true;               // record the CUDA step once and replay it
  double time_limit = 0;                // seconds of training before finishing early; 0: none
  double clip_grad_norm = 1.0;          // global gradient 2-norm limit; 0: no clipping
  std::string lr_schedule = "plateau";  // none, step, plateau, final (see lr_schedule.h)
  double lr_decay = 0.5;
  std::int64_t lr_step_every = 0;  // step schedule: decay every this many steps
  int lr_patience = 3;             // plateau schedule: validations without improvement
  double lr_final_fraction = 0.1;  // final schedule: the decayed part of the run
  double min_lr = 1e-6;
  int gpus = 0;               // data-parallel workers, one per GPU; 0: this process alone (worker_launch.h)
  double rank_timeout = 300;  // seconds a rank waits for the others before it fails
  double gradient_bucket_mb = kDefaultGradientBucketMb;  // MiB of gradients per all-reduce (GradientBuckets)
  std::int64_t replica_check_every = 1000;  // steps between cross-rank parameter checks; 0: only at the end
};

// The steps, the batch and the learning rate, in the order a command's help lists them first.
template <class Options>
void add_step_options(OptionTable<Options>& t) {
  static_assert(std::is_base_of_v<TrainerOptions, Options>);
  using O = TrainerOptions;
  t.add("steps", &O::steps, "total optimisation steps (a resumed run continues up to this)")
      .may_change_on_resume()
      .range(Bounds::in(1, static_cast<double>(limits::kMaxSteps)));
  t.add("batch", &O::batch, "patches per step").changes_the_run().range(Bounds::in(1, kMaxBatch));
}

// The rest of the trainer's options.
template <class Options>
void add_trainer_options(OptionTable<Options>& t) {
  static_assert(std::is_base_of_v<TrainerOptions, Options>);
  using O = TrainerOptions;
  const double max_steps = static_cast<double>(limits::kMaxSteps);
  t.add(kLrOption, &O::lr, "Adam learning rate").changes_the_run().range(Bounds::above(0).finite_only());
  t.add("seed", &O::seed, "seed of the initial weights, the patches and the noise").changes_the_run();
  t.add("checkpoint-every", &O::checkpoint_every,
        "save <out>/checkpoint.safetensors every this many steps (0: only at the end)")
      .may_change_on_resume()
      .range(Bounds::at_least(0).saved_at_most(max_steps));
  t.add("log-every", &O::log_every,
        "append a line to <out>/metrics.jsonl (and, off a terminal, to stderr) every this many steps")
      .may_change_on_resume()
      .range(Bounds::at_least(1).saved_at_most(max_steps));
  t.add("val-every", &O::val_every, "validate on --val every this many steps")
      .may_change_on_resume()
      .range(Bounds::at_least(1).saved_at_most(max_steps));
  t.add("time-limit", &O::time_limit,
        "finish (final validation, checkpoint and model) after this many seconds of training, even before --steps; "
        "0: no limit")
      .range(Bounds::at_least(0).with_note(" seconds"));
  t.add("clip-grad-norm", &O::clip_grad_norm,
        "scale the gradients down when their global 2-norm exceeds this (0: no clipping)")
      .changes_the_run()
      .range(Bounds::at_least(0).finite_only().with_note(" (0: no clipping)"));
  t.add("lr-schedule", &O::lr_schedule,
        "none; step (--lr-decay every --lr-step-every steps); plateau (--lr-decay after --lr-patience validations on "
        "--val without a lower loss); final (--lr-decay once, for the last --lr-final-fraction of --steps or of "
        "--time-limit, whichever comes first)")
      .changes_the_run()
      .type("KIND");
  t.add("lr-decay", &O::lr_decay, "factor the learning rate is multiplied by at each decay, in (0, 1)")
      .changes_the_run()
      .range(Bounds::open(0, 1));
  t.add("lr-step-every", &O::lr_step_every, "step schedule: decay every this many steps").changes_the_run();
  t.add("lr-patience", &O::lr_patience, "plateau schedule: validations without a lower validation loss before a decay")
      .changes_the_run()
      .range(Bounds::at_least(1));
  t.add("lr-final-fraction", &O::lr_final_fraction,
        "final schedule: the fraction of the run, at its end, trained at --lr * --lr-decay")
      .changes_the_run()
      .range(Bounds::open(0, 1));
  t.add("min-lr", &O::min_lr, "the schedule never goes below this learning rate")
      .changes_the_run()
      .range(Bounds::at_least(0).finite_only());
  t.add("cuda-graph", &O::cuda_graph,
        "on: record the CUDA training step once into a CUDA graph and replay it (one launch per step; layers that "
        "do not declare themselves capturable fall back to eager launches, said once in the log); off: launch "
        "every kernel eagerly")
      .one_of({"on", "off"})
      .type("on|off");
  t.add("gpus", &O::gpus,
        "data-parallel training on N GPUs (cuda:0 to cuda:N-1; NCCL): N worker processes, each with --batch "
        "patches of every step, so a step sees N * --batch patches, the same ones as --batch N*B on one GPU; 0: "
        "this process alone. --gpus 1 --device cpu runs the data-parallel path on the CPU");
  t.add("rank-timeout", &O::rank_timeout,
        "with --gpus: seconds a worker waits for the others (joining, gradient all-reduce) before it fails, so a "
        "worker that died stops the run instead of hanging it");
  t.add("gradient-bucket-mb", &O::gradient_bucket_mb,
        "with --gpus: MiB of gradients per all-reduce; each bucket is reduced while backward computes the earlier "
        "layers' gradients, so smaller buckets overlap more of the communication, at the cost of more, smaller "
        "reductions");
  t.add("replica-check-every", &O::replica_check_every,
        "with --gpus: compare a fingerprint of the parameters across workers every this many steps and stop if they "
        "differ (0: only at the end)")
      .range(Bounds::at_least(0).with_note(" (0: only at the end)"));
}

}  // namespace plexus::train

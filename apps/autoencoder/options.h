#pragma once
// The settings of `plexus-ae train` and `plexus-ae eval`, filled by the
// command line (add_train_command, add_eval_command) and, on --resume, by the checkpoint.
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::ae {

// Upper limits of the training options (also applied to saved settings).
inline constexpr int kMaxBatch = 65536;
inline constexpr int kMaxPatch = 65536;
inline constexpr int kMaxThreads = 256;
// --gradient-bucket-mb's default: GradientBuckets::kDefaultBucketBytes (data_parallel.cpp checks it).
inline constexpr double kDefaultGradientBucketMb = 4;

struct TrainOptions {
  std::string data;
  std::string val;
  std::string model = "bls2017";
  std::string out;  // default: runs/<model name>
  double lambda = 0.01;
  // A variable-rate model's trade-offs, one per rate level, increasing (--lambdas).
  std::vector<double> lambdas;
  std::int64_t steps = 100000;
  int batch = 8;
  int patch = 256;
  double lr = 1e-4;
  std::string device = "auto";
  std::uint64_t seed = 1;
  bool resume = false;
  std::string init_from;  // a model or checkpoint whose matching weights start the run (fine-tuning)
  std::int64_t checkpoint_every = 1000;
  std::int64_t log_every = 100;
  std::int64_t val_every = 5000;
  int val_images = 0;  // 0: every image of --val
  std::vector<std::string> plugins;
  int threads = 2;  // decoding threads
  int cpu_threads = 0;  // threads of the CPU kernels; 0: every core
  std::string precision = "bf16";  // f32 | tf32 | bf16 on CUDA; the CPU always runs f32 (kTrainPrecisionHelp)
  bool tf32 = false;               // deprecated --tf32: the same as --precision tf32
  bool cuda_graph = true;  // record the CUDA step once and replay it
  double time_limit = 0;  // seconds of training before finishing early; 0: none
  bool overwrite = false;  // replace a finished model and metrics log in --out
  std::int64_t max_image_pixels = 50'000'000;  // larger images are skipped (data::kDefaultMaxImagePixels)
  double clip_grad_norm = 1.0;  // global gradient 2-norm limit; 0: no clipping
  std::string lr_schedule = "plateau";  // none, step, plateau, final (see lr_schedule.h)
  double lr_decay = 0.5;
  std::int64_t lr_step_every = 0;  // step schedule: decay every this many steps
  int lr_patience = 3;             // plateau schedule: validations without improvement
  double lr_final_fraction = 0.1;  // final schedule: the decayed part of the run
  double min_lr = 1e-6;
  int gpus = 0;                 // data-parallel workers, one per GPU; 0: this process alone (worker_launch.h)
  double rank_timeout = 300;    // seconds a rank waits for the others before it fails
  double gradient_bucket_mb = kDefaultGradientBucketMb;  // MiB of gradients per all-reduce (GradientBuckets)
  std::int64_t replica_check_every = 1000;  // steps between cross-rank parameter checks; 0: only at the end
};

struct EvalOptions {
  std::string model;  // a checkpoint or model .safetensors
  std::string data;
  std::string out;
  std::string device = "auto";
  std::vector<std::string> plugins;
  int cpu_threads = 0;  // threads of the CPU kernels; 0: every core
  std::string precision = "tf32";  // f32 | tf32 | bf16 on CUDA; the CPU always runs f32 (kEvalPrecisionHelp)
  std::int64_t max_image_pixels = 50'000'000;
  double level = -1;  // a variable-rate model's rate level (--level); < 0: not given
};

}  // namespace plexus::ae

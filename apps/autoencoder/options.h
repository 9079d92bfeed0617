#pragma once
// The settings of `plexus-ae train` and `plexus-ae eval`, filled by the
// command line (add_train_command, add_eval_command) and, on --resume, by the checkpoint.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/train/trainer_options.h"

namespace plexus::ae {

// Upper limits of the training options (also applied to saved settings);
// --batch's is the trainer's (train::kMaxBatch).
inline constexpr int kMaxPatch = 65536;
inline constexpr int kMaxThreads = 256;
// --init-from without --lr trains at this fraction of the default learning rate (fine-tuning).
inline constexpr double kInitFromLrFactor = 0.1;

// `plexus-ae train`'s own options beside the trainer's (plexus/train/trainer_options.h);
// each is declared once, in train_option_table() (train_options.h).
struct TrainOptions : train::TrainerOptions {
  std::string data;
  std::string val;
  std::string model = "bls2017";
  std::string out;  // default: runs/<model name>
  double lambda = 0.01;
  // --distortion: "mse" or "ms_ssim" in place of the spec's "loss" distortion terms; empty: the spec's.
  std::string distortion;
  // A variable-rate model's trade-offs, one per rate level, increasing (--lambdas).
  std::vector<double> lambdas;
  int patch = 256;
  std::string device = "auto";
  bool resume = false;
  std::string init_from;  // a model or checkpoint whose matching weights start the run (fine-tuning)
  int val_images = 0;     // 0: every image of --val
  std::vector<std::string> plugins;
  int threads = 2;                 // decoding threads
  int cpu_threads = 0;             // threads of the CPU kernels; 0: every core
  std::string precision = "bf16";  // f32 | tf32 | bf16 on CUDA; the CPU always runs f32 (kTrainPrecisionHelp)
  bool tf32 = false;               // deprecated --tf32: the same as --precision tf32
  bool overwrite = false;          // replace a finished model and metrics log in --out
  std::int64_t max_image_pixels = 50'000'000;  // larger images are skipped (data::kDefaultMaxImagePixels)
};

struct EvalOptions {
  std::string model;  // a checkpoint or model .safetensors
  std::string data;
  std::string out;
  std::string device = "auto";
  std::vector<std::string> plugins;
  int cpu_threads = 0;             // threads of the CPU kernels; 0: every core
  std::string precision = "tf32";  // f32 | tf32 | bf16 on CUDA; the CPU always runs f32 (kEvalPrecisionHelp)
  std::int64_t max_image_pixels = 50'000'000;
  double level = -1;  // a variable-rate model's rate level (--level); < 0: not given
};

}  // namespace plexus::ae

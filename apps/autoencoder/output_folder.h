#pragma once
// What plexus-ae checks about its output folders before it writes to them:
// a finished run is not overwritten by another unless asked, temporary
// files of killed runs are removed, and eval's outputs never land among
// its inputs.
#include <string>

#include "options.h"

namespace plexus::ae {

// train: removes stale temporary files from --out, then refuses (ConfigError)
// to start a new run (no --resume) in an --out holding a finished model or
// a metrics log of an earlier run, unless --overwrite was given. (An --out
// with a checkpoint is left to train, which asks for --resume.)
void prepare_train_output(const TrainOptions& options);

// eval: refuses an --out that is the --data folder or inside it (the
// reconstructions would be evaluated as inputs the next time), and removes
// stale temporary files from --out.
void prepare_eval_output(const EvalOptions& options);

// Creates `folder` and its parents when missing; IoError saying why not.
void create_output_folder(const std::string& folder);

// The message of an image skipped for its size: how to raise the limit.
inline constexpr const char* kPixelLimitHint = "raise the limit with --max-image-pixels";

}  // namespace plexus::ae

#pragma once
// What a training command keeps in a checkpoint's metadata besides what
// save_checkpoint() records (step, optimiser, model spec), so that --resume
// continues the run: its settings (the saved rows of its OptionTable) and
// its progress (the schedule's state, the training seconds so far, the best
// validation score).
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "plexus/checkpoint.h"
#include "plexus/train/option_table.h"

namespace plexus::train {

// The metadata keys of a command's runs, and the command's name for messages.
struct RunMetadataKeys {
  std::string settings;  // e.g. "plexus_ae.train"
  std::string progress;  // e.g. "plexus_ae.progress"
  std::string command;   // e.g. "plexus-ae train"
};

struct RunProgress {
  nlohmann::json lr_schedule;  // LrSchedule::state(); null before the first save
  double elapsed_seconds = 0;  // training time of every run of this output folder so far
  double best_validation = std::numeric_limits<double>::quiet_NaN();  // NaN: no validation yet
};

// The JSON of the progress: {"lr_schedule", "elapsed_seconds", "best_val_psnr"} (the keys of earlier checkpoints).
nlohmann::json progress_json(const RunProgress& progress);
// From the metadata of `file` (read from `path`); a checkpoint without it (an older one) gives the defaults.
// ConfigError naming `path` and the key for JSON nested past kMaxJsonNesting.
RunProgress progress_from_checkpoint(const TensorFile& file, const std::string& path, const RunMetadataKeys& keys);

// The saved settings object of `file` (read from `path`), not yet checked;
// IoError when absent or not a JSON object; ConfigError when nested past kMaxJsonNesting.
nlohmann::json saved_settings_object(const TensorFile& file, const std::string& path, const RunMetadataKeys& keys);

// The saved settings, checked by `table`: IoError "<path> (training settings): at /<key>: must be ...".
template <class Options>
nlohmann::json settings_from_checkpoint(const TensorFile& file, const std::string& path, const RunMetadataKeys& keys,
                                        const OptionTable<Options>& table) {
  nlohmann::json settings = saved_settings_object(file, path, keys);
  table.check_saved(settings, path + " (training settings)");
  return settings;
}

}  // namespace plexus::train

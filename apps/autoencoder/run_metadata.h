#pragma once
// What plexus-ae keeps in a checkpoint's metadata besides what
// save_checkpoint() records (step, optimiser, model spec): the training
// settings, so --resume continues with them and eval knows the model.
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "options.h"
#include "plexus/checkpoint.h"
#include "plexus/model_spec.h"

namespace plexus::ae {

inline constexpr const char* kTrainSettingsKey = "plexus_ae.train";
// The run's progress besides step and optimiser: the learning-rate schedule's
// state, the training seconds so far, the best validation PSNR.
inline constexpr const char* kTrainProgressKey = "plexus_ae.progress";

nlohmann::json train_settings(const TrainOptions& options, int stride);

// Fills every option not in `given` (the long names set on the command
// line) from the saved settings, and warns for those given with a value
// that differs where it changes the run (the resumed run is then no longer
// the uninterrupted one).
void apply_saved_settings(TrainOptions& options, const nlohmann::json& saved, const std::set<std::string>& given);

// Throws IoError "<source>: at /<key>: ..." for a saved setting of the wrong
// type or out of range (a step count below 0, a batch of 10^12), so a
// tampered or corrupt checkpoint is refused before anything is built.
void check_saved_settings(const nlohmann::json& saved, const std::string& source);
// The saved training settings, checked; IoError when absent or invalid.
nlohmann::json settings_from_checkpoint(const TensorFile& file, const std::string& path);

}  // namespace plexus::ae

#include "plexus/train/run_metadata.h"

#include <cmath>

#include "plexus/error.h"
#include "plexus/json_nesting.h"

namespace plexus::train {

nlohmann::json progress_json(const RunProgress& p) {
  return {{"lr_schedule", p.lr_schedule},
          {"elapsed_seconds", p.elapsed_seconds},
          {"best_val_psnr",
           std::isfinite(p.best_validation) ? nlohmann::json(p.best_validation) : nlohmann::json(nullptr)}};
}

RunProgress progress_from_checkpoint(const TensorFile& file, const std::string& path, const RunMetadataKeys& keys) {
  RunProgress progress;
  auto it = file.metadata.find(keys.progress);
  if (it == file.metadata.end()) return progress;
  check_json_nesting(it->second, "'" + path + "' (metadata \"" + keys.progress + "\")");
  auto saved = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!saved.is_object()) return progress;
  if (saved.contains("lr_schedule")) progress.lr_schedule = saved.at("lr_schedule");
  if (saved.contains("elapsed_seconds") && saved.at("elapsed_seconds").is_number())
    progress.elapsed_seconds = saved.at("elapsed_seconds").get<double>();
  if (saved.contains("best_val_psnr") && saved.at("best_val_psnr").is_number())
    progress.best_validation = saved.at("best_val_psnr").get<double>();
  return progress;
}

nlohmann::json saved_settings_object(const TensorFile& file, const std::string& path, const RunMetadataKeys& keys) {
  auto it = file.metadata.find(keys.settings);
  if (it == file.metadata.end())
    throw IoError("'" + path + "' carries no " + keys.command.substr(0, keys.command.find(' ')) +
                  " training settings; was it written by " + keys.command + "?");
  check_json_nesting(it->second, "'" + path + "' (metadata \"" + keys.settings + "\")");
  auto settings = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object())
    throw IoError("'" + path + "' carries unreadable " + keys.command.substr(0, keys.command.find(' ')) +
                  " training settings: " + it->second);
  return settings;
}

}  // namespace plexus::train

#include "run_metadata.h"

#include <spdlog/spdlog.h>

#include "plexus/error.h"

namespace plexus::ae {

// The metadata key under which save_checkpoint() stores the model spec.
static constexpr const char* kModelSpecKey = "model_spec";

nlohmann::json train_settings(const TrainOptions& o, int stride) {
  return {{"data", o.data},         {"val", o.val},
          {"model", o.model},       {"lambda", o.lambda},
          {"steps", o.steps},       {"batch", o.batch},
          {"patch", o.patch},       {"lr", o.lr},
          {"seed", o.seed},         {"checkpoint_every", o.checkpoint_every},
          {"log_every", o.log_every}, {"val_every", o.val_every},
          {"val_images", o.val_images}, {"stride", stride},
          {"clip_grad_norm", o.clip_grad_norm}, {"lr_schedule", o.lr_schedule},
          {"lr_decay", o.lr_decay}, {"lr_step_every", o.lr_step_every},
          {"lr_patience", o.lr_patience}, {"min_lr", o.min_lr}};
}

namespace {
template <typename T>
void restore(T& value, const nlohmann::json& saved, const char* key, const std::set<std::string>& given,
             bool changes_the_run) {
  if (!saved.contains(key)) return;
  const T saved_value = saved.at(key).get<T>();
  if (!given.count(key)) {
    value = saved_value;
  } else if (changes_the_run && value != saved_value) {
    spdlog::warn("--{} {} differs from the checkpoint's {}; the resumed run will not match an uninterrupted one",
                 key, nlohmann::json(value).dump(), nlohmann::json(saved_value).dump());
  }
}
}  // namespace

void apply_saved_settings(TrainOptions& o, const nlohmann::json& saved, const std::set<std::string>& given) {
  restore(o.data, saved, "data", given, true);
  restore(o.val, saved, "val", given, false);
  restore(o.model, saved, "model", given, true);
  restore(o.lambda, saved, "lambda", given, true);
  restore(o.steps, saved, "steps", given, false);
  restore(o.batch, saved, "batch", given, true);
  restore(o.patch, saved, "patch", given, true);
  restore(o.lr, saved, "lr", given, true);
  restore(o.seed, saved, "seed", given, true);
  restore(o.checkpoint_every, saved, "checkpoint_every", given, false);
  restore(o.log_every, saved, "log_every", given, false);
  restore(o.val_every, saved, "val_every", given, false);
  restore(o.val_images, saved, "val_images", given, false);
  restore(o.clip_grad_norm, saved, "clip_grad_norm", given, true);
  restore(o.lr_schedule, saved, "lr_schedule", given, true);
  restore(o.lr_decay, saved, "lr_decay", given, true);
  restore(o.lr_step_every, saved, "lr_step_every", given, true);
  restore(o.lr_patience, saved, "lr_patience", given, true);
  restore(o.min_lr, saved, "min_lr", given, true);
}

ModelSpec spec_from_checkpoint(const TensorFile& file, const std::string& path) {
  auto it = file.metadata.find(kModelSpecKey);
  if (it == file.metadata.end())
    throw IoError("'" + path + "' carries no model spec in its metadata; is it a checkpoint written by plexus-ae?");
  try {
    return ModelSpec::from_text(it->second, path + " (model spec in its metadata)");
  } catch (const ConfigError& e) {
    throw IoError(std::string("'") + path + "' carries a model spec that does not parse: " + e.what());
  }
}

nlohmann::json settings_from_checkpoint(const TensorFile& file, const std::string& path) {
  auto it = file.metadata.find(kTrainSettingsKey);
  if (it == file.metadata.end())
    throw IoError("'" + path + "' carries no plexus-ae training settings; was it written by plexus-ae train?");
  auto settings = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object())
    throw IoError("'" + path + "' carries unreadable plexus-ae training settings: " + it->second);
  return settings;
}

}  // namespace plexus::ae

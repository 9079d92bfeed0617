#include "run_metadata.h"

#include <cmath>
#include <limits>

#include <spdlog/spdlog.h>

#include "plexus/checked_math.h"
#include "plexus/error.h"

namespace plexus::ae {

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
          {"lr_patience", o.lr_patience}, {"lr_final_fraction", o.lr_final_fraction},
          {"min_lr", o.min_lr},     {"lambdas", o.lambdas}};
}

namespace {

// A saved integer setting: present or not, but if present an integer in [min, max].
void check_integer(const nlohmann::json& saved, const char* key, std::int64_t min, std::int64_t max,
                   const std::string& source) {
  if (!saved.contains(key)) return;
  const nlohmann::json& value = saved.at(key);
  const bool in_range = value.is_number_integer() &&
                        (value.is_number_unsigned() ? value.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                                                    : value.get<std::int64_t>() >= min && value.get<std::int64_t>() <= max);
  if (!in_range)
    throw IoError(source + ": at /" + key + ": must be an integer in [" + std::to_string(min) + ", " +
                  std::to_string(max) + "], got " + value.dump());
}

void check_positive_number(const nlohmann::json& saved, const char* key, const std::string& source) {
  if (!saved.contains(key)) return;
  const nlohmann::json& value = saved.at(key);
  if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>()))
    throw IoError(source + ": at /" + key + ": must be a finite number > 0, got " + value.dump());
}

void check_string(const nlohmann::json& saved, const char* key, const std::string& source) {
  if (saved.contains(key) && !saved.at(key).is_string())
    throw IoError(source + ": at /" + key + ": must be a string, got " + saved.at(key).dump());
}

}  // namespace

void check_saved_settings(const nlohmann::json& saved, const std::string& source) {
  for (const char* key : {"data", "val", "model"}) check_string(saved, key, source);
  for (const char* key : {"lambda", "lr"}) check_positive_number(saved, key, source);
  check_integer(saved, "steps", 1, limits::kMaxSteps, source);
  check_integer(saved, "batch", 1, kMaxBatch, source);
  check_integer(saved, "patch", 1, kMaxPatch, source);
  if (saved.contains("seed") && !saved.at("seed").is_number_unsigned())  // any unsigned 64-bit value
    throw IoError(source + ": at /seed: must be an integer in [0, 2^64 - 1], got " + saved.at("seed").dump());
  check_integer(saved, "checkpoint_every", 0, limits::kMaxSteps, source);
  check_integer(saved, "log_every", 1, limits::kMaxSteps, source);
  check_integer(saved, "val_every", 1, limits::kMaxSteps, source);
  check_integer(saved, "val_images", 0, std::numeric_limits<int>::max(), source);
  if (saved.contains("lambdas")) {
    const nlohmann::json& lambdas = saved.at("lambdas");
    bool valid = lambdas.is_array() && lambdas.size() <= 1000;
    for (std::size_t i = 0; valid && i < lambdas.size(); ++i)
      valid = lambdas[i].is_number() && lambdas[i].get<double>() > 0 && std::isfinite(lambdas[i].get<double>());
    if (!valid)
      throw IoError(source + ": at /lambdas: must be a list of at most 1000 finite numbers > 0, got " + lambdas.dump());
  }
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
  restore(o.lambdas, saved, "lambdas", given, true);
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
  restore(o.lr_final_fraction, saved, "lr_final_fraction", given, true);
  restore(o.min_lr, saved, "min_lr", given, true);
}

nlohmann::json settings_from_checkpoint(const TensorFile& file, const std::string& path) {
  auto it = file.metadata.find(kTrainSettingsKey);
  if (it == file.metadata.end())
    throw IoError("'" + path + "' carries no plexus-ae training settings; was it written by plexus-ae train?");
  auto settings = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object())
    throw IoError("'" + path + "' carries unreadable plexus-ae training settings: " + it->second);
  check_saved_settings(settings, path + " (training settings)");
  return settings;
}

}  // namespace plexus::ae

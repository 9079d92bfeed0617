#include "plexus/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plexus/error.h"

namespace plexus::train {

LrSchedule::LrSchedule(const TrainerOptions& o)
    : kind_(o.lr_schedule),
      base_(o.lr),
      decay_(o.lr_decay),
      min_(o.min_lr),
      step_every_(o.lr_step_every),
      steps_(o.steps),
      time_limit_(o.time_limit),
      final_fraction_(o.lr_final_fraction),
      patience_(o.lr_patience),
      rate_(o.lr),
      best_loss_(std::numeric_limits<double>::infinity()) {
  if (kind_ != "none" && kind_ != "step" && kind_ != "plateau" && kind_ != "final")
    throw ConfigError("--lr-schedule must be none, step, plateau or final, got '" + kind_ + "'");
  if (!(decay_ > 0 && decay_ < 1)) throw ConfigError("--lr-decay must be in (0, 1), got " + std::to_string(decay_));
  if (!(min_ >= 0) || !std::isfinite(min_)) throw ConfigError("--min-lr must be >= 0, got " + std::to_string(min_));
  if (kind_ == "step" && step_every_ < 1)
    throw ConfigError("--lr-schedule step needs --lr-step-every >= 1, got " + std::to_string(step_every_));
  if (!(final_fraction_ > 0 && final_fraction_ < 1))
    throw ConfigError("--lr-final-fraction must be in (0, 1), got " + std::to_string(final_fraction_));
  if (patience_ < 1) throw ConfigError("--lr-patience must be >= 1, got " + std::to_string(patience_));
}

double LrSchedule::rate_for_step(std::int64_t steps_done, double seconds_this_run) const {
  if (kind_ == "final") {
    double progress = steps_ > 0 ? static_cast<double>(steps_done) / static_cast<double>(steps_) : 0.0;
    if (time_limit_ > 0) progress = std::max(progress, seconds_this_run / time_limit_);
    return progress >= 1.0 - final_fraction_ ? std::max(min_, base_ * decay_) : base_;
  }
  if (kind_ != "step") return rate_;
  const std::int64_t decays = steps_done / step_every_;  // whole periods completed
  return std::max(min_, base_ * std::pow(decay_, static_cast<double>(decays)));
}

bool LrSchedule::observe_validation(double loss) {
  if (loss < best_loss_) {
    best_loss_ = loss;
    bad_validations_ = 0;
    return false;
  }
  if (kind_ != "plateau" || ++bad_validations_ < patience_) return false;
  bad_validations_ = 0;
  const double lowered = std::max(min_, rate_ * decay_);
  const bool changed = lowered < rate_;
  rate_ = lowered;
  return changed;
}

nlohmann::json LrSchedule::state() const {
  // best_loss_ is infinite before the first validation; JSON has no infinity.
  return {{"kind", kind_},
          {"rate", rate_},
          {"best_loss", std::isfinite(best_loss_) ? nlohmann::json(best_loss_) : nlohmann::json(nullptr)},
          {"bad_validations", bad_validations_}};
}

void LrSchedule::restore(const nlohmann::json& state) {
  if (!state.is_object() || state.value("kind", "") != kind_) return;  // another schedule: start it afresh
  rate_ = state.value("rate", rate_);
  const auto& best = state.contains("best_loss") ? state.at("best_loss") : nlohmann::json(nullptr);
  best_loss_ = best.is_number() ? best.get<double>() : std::numeric_limits<double>::infinity();
  bad_validations_ = state.value("bad_validations", 0);
}

}  // namespace plexus::train

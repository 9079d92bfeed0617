#pragma once
// The learning-rate schedule of the trainer (--lr-schedule):
//   none     lr stays --lr
//   step     lr = --lr * decay^floor(step / --lr-step-every)
//   plateau  lr *= decay after --lr-patience validations in a row whose
//            loss did not improve on the best so far (needs --val)
//   final    lr = --lr, then --lr * decay for the final --lr-final-fraction
//            of the run: of --steps, or of --time-limit seconds of this
//            run, whichever is further along (a time-limited run decays in
//            its last tenth of time by default, whatever its step count)
// never below --min-lr. Its state is saved in the checkpoint and restored
// on --resume, so a resumed run follows the same schedule.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plexus/train/trainer_options.h"

namespace plexus::train {

class LrSchedule {
 public:
  explicit LrSchedule(const TrainerOptions& options);  // throws ConfigError for bad settings
  // The rate for the step about to run (0-based count of steps done;
  // seconds trained in this run, which only the final schedule reads).
  double rate_for_step(std::int64_t steps_done, double seconds_this_run = 0) const;
  // Records a validation loss; true when the rate was lowered (plateau).
  bool observe_validation(double loss);
  double current_rate() const { return rate_; }

  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  std::string kind_;
  double base_, decay_, min_;
  std::int64_t step_every_;
  std::int64_t steps_;
  double time_limit_, final_fraction_;
  int patience_;
  double rate_;
  double best_loss_;
  int bad_validations_ = 0;
};

}  // namespace plexus::train

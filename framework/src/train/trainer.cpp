#include "plexus/train/trainer.h"

#include <spdlog/spdlog.h>

#include "plexus/distributed/replicas.h"
#include "plexus/tensor_ops.h"
#include "plexus/train/exit_codes.h"
#include "plexus/train/run_clock.h"
#include "plexus/train/stop_signal.h"

namespace plexus::train {

namespace {

bool parameters_finite(Context& ctx, Net& net, std::string* culprit) {
  for (const auto& p : net.parameters())
    if (!all_finite(ctx, p.parameter->value)) {
      *culprit = p.name;
      return false;
    }
  return true;
}

}  // namespace

Trainer::Trainer(const TrainerParts& parts, data::BatchLoader& loader, const StepLoss& loss,
                 const TrainerOptions& options, TrainerCommand& command)
    : parts_(parts),
      o_(options),
      command_(command),
      training_(parts.net, parts.optimizer, parts.ctx, loader, loss, options.seed, options.cuda_graph, parts.step,
                parts.parallel ? &parts.parallel->communicator() : nullptr,
                gradient_bucket_bytes(options.gradient_bucket_mb)),
      last_good_checkpoint_(parts.resumed ? parts.step : -1),
      first_step_(parts.step),
      next_agreement_step_(parts.step + DataParallelRank::kFirstAgreementStep),
      last_step_(options.steps),
      window_start_(std::chrono::steady_clock::now()) {
  training_.set_gradient_clipper(parts.clipper);
}

int Trainer::train() {
  std::int64_t& step = parts_.step;
  while (step < last_step_) {
    const auto step_start = std::chrono::steady_clock::now();
    if (!take_step()) return kExitError;
    check_time_limit();
    update_pace(step_start);
    if (due(o_.log_every) && !log_window()) return kExitError;
    command_.after_step();
    if (command_.validates() && due(o_.val_every) && !validate()) return kExitError;
    if (parts_.parallel && o_.replica_check_every > 0 && step % o_.replica_check_every == 0)
      distributed::check_replicas_agree(parts_.ctx, parts_.parallel->communicator(), parts_.net.parameters(), step);
    if (o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0 && step < last_step_ && !save_checkpoint("periodic"))
      return kExitError;
    if (const std::optional<int> signal_number = stop_signal()) return stop(*signal_number);
  }
  return finish();
}

bool Trainer::take_step() {
  std::int64_t& step = parts_.step;
  parts_.optimizer.set_learning_rate(parts_.schedule.rate_for_step(step, schedule_seconds()));  // read by begin_step
  training_.run(step);
  ++step;
  if (parts_.parallel && step == next_agreement_step_) {
    agreed_ = parts_.parallel->agree(parts_.ctx, stop_requested(), out_of_time(), seconds_this_run(parts_.start),
                                     seconds_per_step_);
    next_agreement_step_ = step + agreed_.next_interval;
  }
  if (!training_.checks_every_step()) return true;
  // The CPU: free, so every step.
  const TrainingWindow now = training_.peek_window();
  if (diverged(now.divergence)) return false;
  command_.on_step_values(now);
  return true;
}

void Trainer::check_time_limit() {
  const std::int64_t step = parts_.step;
  if (step >= last_step_ || !(parts_.parallel ? agreed_.out_of_time : out_of_time())) return;
  last_step_ = step;
  command_.end_line();
  spdlog::info("--time-limit of {} s reached after step {} of {}; finishing", o_.time_limit, step, o_.steps);
}

void Trainer::update_pace(std::chrono::steady_clock::time_point step_start) {
  const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  seconds_per_step_ = parts_.step == first_step_ + 1 ? step_seconds : 0.9 * seconds_per_step_ + 0.1 * step_seconds;
  command_.on_pace(parts_.step, seconds_per_step_);
}

bool Trainer::due(std::int64_t every) const { return parts_.step % every == 0 || parts_.step == last_step_; }

bool Trainer::log_window() {
  const TrainingWindow window = training_.read_window();
  if (diverged(window.divergence)) return false;
  const auto now = std::chrono::steady_clock::now();
  const double window_seconds = std::chrono::duration<double>(now - window_start_).count();
  command_.on_log(window, window_seconds, training_.seconds_waiting_for_loader() - window_start_loader_wait_);
  window_start_ = now;
  window_start_loader_wait_ = training_.seconds_waiting_for_loader();
  return true;
}

bool Trainer::validate() {
  if (diverged(training_.divergence())) return false;
  const double loss = command_.validate();
  LrSchedule& schedule = parts_.schedule;
  if (schedule.observe_validation(loss)) {
    spdlog::info("validation loss has not improved for {} validation(s): learning rate lowered to {}", o_.lr_patience,
                 schedule.current_rate());
    parts_.optimizer.set_learning_rate(schedule.rate_for_step(parts_.step, schedule_seconds()));
  }
  return true;
}

bool Trainer::diverged(const std::optional<Divergence>& d) {
  if (!d) return false;
  command_.end_line();
  command_.on_diverged(*d, last_good_checkpoint_text());
  return true;
}

std::string Trainer::last_good_checkpoint_text() const {
  if (last_good_checkpoint_ < 0) return "No checkpoint had been saved yet.";
  return "The last good checkpoint, '" + command_.checkpoint_path() + "' at step " +
         std::to_string(last_good_checkpoint_) + ", is kept.";
}

bool Trainer::save_checkpoint(const char* why) {
  if (diverged(training_.divergence())) return false;
  std::string culprit;
  if (!parameters_finite(parts_.ctx, parts_.net, &culprit)) {
    command_.end_line();
    spdlog::error("training diverged: parameter '{}' is not finite after step {}; not saving the {} checkpoint. {}",
                  culprit, parts_.step, why, last_good_checkpoint_text());
    return false;
  }
  if (parts_.root) command_.write_checkpoint();
  last_good_checkpoint_ = parts_.step;
  return true;
}

std::optional<int> Trainer::stop_signal() {
  int signal_number = 0;
  const bool stop = parts_.parallel ? agreed_.stop : stop_requested(&signal_number);
  if (!stop) return std::nullopt;
  if (parts_.parallel) stop_requested(&signal_number);  // this rank's own signal, if it got one
  return signal_number;
}

int Trainer::stop(int signal_number) {
  command_.end_line();
  if (!save_checkpoint("interrupted")) return kExitError;
  command_.on_stopped(signal_number);
  return kExitInterrupted;
}

int Trainer::finish() {
  command_.end_line();
  if (parts_.parallel)
    distributed::check_replicas_agree(parts_.ctx, parts_.parallel->communicator(), parts_.net.parameters(),
                                      parts_.step);
  if (!save_checkpoint("final")) return kExitError;
  if (!parts_.root) return kExitOk;
  command_.on_finished();
  return kExitOk;
}

bool Trainer::out_of_time() const { return o_.time_limit > 0 && seconds_this_run(parts_.start) >= o_.time_limit; }

double Trainer::schedule_seconds() const { return parts_.parallel ? agreed_.seconds : seconds_this_run(parts_.start); }

}  // namespace plexus::train

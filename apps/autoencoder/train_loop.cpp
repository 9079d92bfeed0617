#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "exit_codes.h"
#include "image_evaluation.h"
#include "plexus/checkpoint.h"
#include "plexus/distributed/replicas.h"
#include "plexus/error.h"
#include "plexus/tensor_ops.h"
#include "plexus/train/run_clock.h"
#include "plexus/train/stop_signal.h"
#include "rate_levels.h"
#include "skipped_images.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

// A fall of this many dB in validation PSNR below the best so far is reported as divergence.
constexpr double kPsnrCollapseDb = 3.0;

// The loss the steps train: weight * mse + bpp, the terms in this order.
constexpr std::size_t kMseTerm = 0, kBppTerm = 1;
train::StepLoss codec_loss(double weight) { return {kImage, {{kDistortion, weight}, {kRate, 1.0}}}; }

using train::seconds_this_run;
using train::stop_requested;

struct Validation {
  double psnr = 0, bpp = 0, loss = 0;
  int images = 0;
};

// Mean PSNR and bpp over (up to `limit`) validation images in eval mode;
// the net is put back to the training shape afterwards.
Validation validate_images(Net& net, Context& ctx, data::ImageFolder& images, int stride, int limit, double weight,
                           const Shape& training_shape, double level) {
  Validation v;
  double mse = 0;
  const std::size_t count = limit > 0 ? std::min<std::size_t>(images.size(), limit) : images.size();
  for (std::size_t i = 0; i < count; ++i) {
    auto image = images.load(i);
    if (!image) continue;
    ImageEvaluation e = evaluate_image(net, ctx, *image, stride, level);
    v.psnr += e.psnr;
    v.bpp += e.bpp;
    mse += e.mse;
    ++v.images;
  }
  net.reshape(model_input_shapes(net.spec(), training_shape));
  if (v.images == 0) throw IoError("no validation image in '" + images.folder() + "' could be decoded");
  v.psnr /= v.images;
  v.bpp /= v.images;
  v.loss = weight * mse / v.images + v.bpp;
  return v;
}

bool parameters_finite(Context& ctx, Net& net, std::string* culprit) {
  for (const auto& p : net.parameters())
    if (!all_finite(ctx, p.parameter->value)) {
      *culprit = p.name;
      return false;
    }
  return true;
}

std::unique_ptr<MetricsLog> open_metrics_log(const TrainingRun& run) {
  if (!run.root) return nullptr;
  const TrainOptions& o = run.settings.options;
  return std::make_unique<MetricsLog>((fs::path(o.out) / "metrics.jsonl").string(), o.resume ? run.step : -1);
}

data::PatchSampler patch_sampler(const TrainingRun& run) {
  const TrainOptions& o = run.settings.options;
  const data::Shard shard{run.parallel ? run.parallel->rank() : 0, run.world_size()};
  return data::PatchSampler(o.seed, o.batch, o.patch, shard);
}

}  // namespace

TrainLoop::TrainLoop(TrainingRun& run)
    : run_(run),
      o_(run.settings.options),
      log_(open_metrics_log(run)),
      loader_(run.images.train, patch_sampler(run), run.step, o_.threads, 2 * std::max(1, o_.threads) + 1,
              run.settings.device),
      bar_(stderr_is_terminal(), o_.log_every),
      training_(run.net, run.adam, run.ctx, loader_, codec_loss(run.weight), o_.seed, o_.cuda_graph, run.step,
                run.parallel ? &run.parallel->communicator() : nullptr,
                train::gradient_bucket_bytes(o_.gradient_bucket_mb)),
      last_good_checkpoint_(o_.resume ? run.step : -1),
      first_step_(run.step),
      next_agreement_step_(run.step + train::DataParallelRank::kFirstAgreementStep),
      last_step_(o_.steps),
      window_start_(std::chrono::steady_clock::now()) {
  training_.set_gradient_clipper(run.clipper.get());
  if (run.settings.rate_levels > 0) training_.set_before_step(draw_rate_levels(o_.lambdas));
  stats_.total = o_.steps;
}

int TrainLoop::train() {
  while (run_.step < last_step_) {
    const auto step_start = std::chrono::steady_clock::now();
    if (!take_step()) return kExitError;
    check_time_limit();
    update_pace(step_start);
    if (due(o_.log_every) && !log_window()) return kExitError;
    if (run_.root) bar_.update(stats_);
    if (run_.images.validation && due(o_.val_every) && !validate()) return kExitError;
    if (run_.parallel && o_.replica_check_every > 0 && run_.step % o_.replica_check_every == 0)
      distributed::check_replicas_agree(run_.ctx, run_.parallel->communicator(), run_.net.parameters(), run_.step);
    if (o_.checkpoint_every > 0 && run_.step % o_.checkpoint_every == 0 && run_.step < last_step_ &&
        !save_checkpoint("periodic"))
      return kExitError;
    if (const std::optional<int> signal_number = stop_signal()) return stop(*signal_number);
  }
  return finish();
}

bool TrainLoop::take_step() {
  run_.adam.set_learning_rate(run_.schedule.rate_for_step(run_.step, schedule_seconds()));  // read by begin_step
  training_.run(run_.step);
  ++run_.step;
  if (run_.parallel && run_.step == next_agreement_step_) {
    agreed_ = run_.parallel->agree(run_.ctx, stop_requested(), out_of_time(), seconds_this_run(run_.start),
                                   seconds_per_step_);
    next_agreement_step_ = run_.step + agreed_.next_interval;
  }
  if (!training_.checks_every_step()) return true;
  // The CPU: free, so every step, as the progress line always did.
  const train::TrainingWindow now = training_.peek_window();
  if (diverged(now.divergence)) return false;
  smoothed_.add(now.last_loss, now.last_terms[kMseTerm], now.last_terms[kBppTerm]);
  stats_.loss = smoothed_.loss;
  stats_.bpp = smoothed_.bpp;
  stats_.psnr = psnr_of_mse(smoothed_.mse);
  return true;
}

void TrainLoop::check_time_limit() {
  if (run_.step >= last_step_ || !(run_.parallel ? agreed_.out_of_time : out_of_time())) return;
  last_step_ = run_.step;
  bar_.finish();
  spdlog::info("--time-limit of {} s reached after step {} of {}; finishing", o_.time_limit, run_.step, o_.steps);
}

void TrainLoop::update_pace(std::chrono::steady_clock::time_point step_start) {
  const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  seconds_per_step_ = run_.step == first_step_ + 1 ? step_seconds : 0.9 * seconds_per_step_ + 0.1 * step_seconds;
  stats_.step = run_.step;
  // Images of all ranks.
  stats_.images_per_second = seconds_per_step_ > 0 ? o_.batch * run_.world_size() / seconds_per_step_ : 0;
  stats_.eta_seconds =
      train::remaining_seconds(seconds_per_step_, o_.steps - run_.step, o_.time_limit, seconds_this_run(run_.start));
}

bool TrainLoop::due(std::int64_t every) const { return run_.step % every == 0 || run_.step == last_step_; }

bool TrainLoop::log_window() {
  const train::TrainingWindow window = training_.read_window();
  const double mse = window.terms[kMseTerm], bpp = window.terms[kBppTerm];
  if (diverged(window.divergence)) return false;
  const auto now = std::chrono::steady_clock::now();
  const double window_seconds = std::chrono::duration<double>(now - window_start_).count();
  if (!training_.checks_every_step()) {  // CUDA: the window's means, read here without a per-step wait
    stats_.loss = window.loss;
    stats_.bpp = bpp;
    stats_.psnr = psnr_of_mse(mse);
  }
  if (log_)
    log_->write({{"kind", "train"},
                 {"step", run_.step},
                 {"loss", window.loss},
                 {"mse", mse},
                 {"bpp", bpp},
                 {"psnr", psnr_of_mse(mse)},
                 {"lr", run_.adam.learning_rate()},
                 {"images_per_second",
                  window_seconds > 0 ? window.steps * o_.batch * run_.world_size() / window_seconds : 0.0},
                 {"loader_wait_seconds", training_.seconds_waiting_for_loader() - window_start_loader_wait_},
                 {"elapsed_seconds", run_.elapsed_seconds()}});
  window_start_ = now;
  window_start_loader_wait_ = training_.seconds_waiting_for_loader();
  return true;
}

bool TrainLoop::validate() {
  if (diverged(training_.divergence())) return false;
  const Validation v = validate_images(run_.net, run_.ctx, *run_.images.validation, run_.settings.stride,
                                       o_.val_images, run_.weight, run_.training_shape, run_.validation_level());
  if (run_.root) bar_.finish();
  spdlog::info("validation at step {}: PSNR {:.2f} dB, {:.4f} bpp over {} image(s) of '{}'", run_.step, v.psnr, v.bpp,
               v.images, o_.val);
  if (log_)
    log_->write({{"kind", "val"}, {"step", run_.step}, {"psnr", v.psnr}, {"bpp", v.bpp}, {"loss", v.loss},
                 {"images", v.images}, {"elapsed_seconds", run_.elapsed_seconds()}});
  double& best = run_.best_val_psnr;
  if (std::isfinite(best) && v.psnr < best - kPsnrCollapseDb)
    spdlog::warn("validation PSNR collapsed from {:.2f} dB (the best so far) to {:.2f} dB: training is diverging. "
                 "Try a lower --lr (now {}) or --clip-grad-norm (now {})",
                 best, v.psnr, run_.adam.learning_rate(), o_.clip_grad_norm);
  if (!std::isfinite(best) || v.psnr > best) best = v.psnr;
  if (run_.schedule.observe_validation(v.loss)) {
    spdlog::info("validation loss has not improved for {} validation(s): learning rate lowered to {}",
                 o_.lr_patience, run_.schedule.current_rate());
    run_.adam.set_learning_rate(run_.schedule.rate_for_step(run_.step, schedule_seconds()));
  }
  return true;
}

bool TrainLoop::diverged(const std::optional<train::Divergence>& d) {
  if (!d) return false;
  bar_.finish();
  spdlog::error(
      "training diverged: the loss is {} at step {} (mse {}, bpp {}); stopped without saving. {} "
      "Try a lower --lr (now {}) or check the data.",
      std::isnan(d->loss) ? "NaN" : "infinite", d->step, d->terms[kMseTerm], d->terms[kBppTerm],
      last_good_checkpoint_text(), o_.lr);
  warn_skipped_images(run_.images.train, "training");
  return true;
}

std::string TrainLoop::last_good_checkpoint_text() const {
  if (last_good_checkpoint_ < 0) return "No checkpoint had been saved yet.";
  return "The last good checkpoint, '" + run_.settings.checkpoint_path + "' at step " +
         std::to_string(last_good_checkpoint_) + ", is kept.";
}

bool TrainLoop::save_checkpoint(const char* why) {
  if (diverged(training_.divergence())) return false;
  std::string culprit;
  if (!parameters_finite(run_.ctx, run_.net, &culprit)) {
    bar_.finish();
    spdlog::error("training diverged: parameter '{}' is not finite after step {}; not saving the {} checkpoint. {}",
                  culprit, run_.step, why, last_good_checkpoint_text());
    return false;
  }
  if (run_.root)
    plexus::save_checkpoint(run_.settings.checkpoint_path, run_.net, &run_.adam, run_.step,
                            run_.checkpoint_metadata());
  last_good_checkpoint_ = run_.step;
  return true;
}

std::optional<int> TrainLoop::stop_signal() {
  int signal_number = 0;
  const bool stop = run_.parallel ? agreed_.stop : stop_requested(&signal_number);
  if (!stop) return std::nullopt;
  if (run_.parallel) stop_requested(&signal_number);  // this rank's own signal, if it got one
  return signal_number;
}

int TrainLoop::stop(int signal_number) {
  bar_.finish();
  if (!save_checkpoint("interrupted")) return kExitError;
  if (run_.root)
    spdlog::warn("interrupted by {} after step {} of {}; saved '{}'. Continue with: plexus-ae train --out {} --resume{}",
                 signal_number == SIGTERM ? "SIGTERM" : "Ctrl-C (SIGINT)", run_.step, o_.steps,
                 run_.settings.checkpoint_path, o_.out, o_.gpus > 0 ? " --gpus N (any N)" : "");
  warn_skipped_images(run_.images.train, "training");
  return kExitInterrupted;
}

int TrainLoop::finish() {
  bar_.finish();
  if (run_.parallel)
    distributed::check_replicas_agree(run_.ctx, run_.parallel->communicator(), run_.net.parameters(), run_.step);
  if (!save_checkpoint("final")) return kExitError;
  if (!run_.root) return kExitOk;
  run_.write_model();
  std::printf("trained %lld steps: loss %.4f, bpp %.4f, PSNR %.2f dB (moving average of the last steps, training noise)\n",
              static_cast<long long>(run_.step), stats_.loss, stats_.bpp, stats_.psnr);
  std::printf("model: %s\ncheckpoint: %s\nmetrics: %s\n", run_.settings.model_path.c_str(),
              run_.settings.checkpoint_path.c_str(), log_->path().c_str());
  warn_skipped_images(run_.images.train, "training");
  if (run_.images.validation) warn_skipped_images(*run_.images.validation, "validation");
  return kExitOk;
}

bool TrainLoop::out_of_time() const {
  return o_.time_limit > 0 && seconds_this_run(run_.start) >= o_.time_limit;
}

double TrainLoop::schedule_seconds() const {
  return run_.parallel ? agreed_.seconds : seconds_this_run(run_.start);
}

}  // namespace plexus::ae

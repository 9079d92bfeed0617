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
#include "plexus/error.h"
#include "plexus/train/run_clock.h"
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
      trainer_({run.net, run.adam, run.ctx, run.schedule, run.clipper.get(), run.parallel.get(), run.root, run.step,
                run.start, o_.resume},
               loader_, codec_loss(run.weight), o_, *this) {
  if (run.settings.rate_levels > 0) trainer_.training_step().set_before_step(draw_rate_levels(o_.lambdas));
  stats_.total = o_.steps;
}

int TrainLoop::train() { return trainer_.train(); }

void TrainLoop::end_line() { bar_.finish(); }

void TrainLoop::on_step_values(const train::TrainingWindow& now) {
  smoothed_.add(now.last_loss, now.last_terms[kMseTerm], now.last_terms[kBppTerm]);
  stats_.loss = smoothed_.loss;
  stats_.bpp = smoothed_.bpp;
  stats_.psnr = psnr_of_mse(smoothed_.mse);
}

void TrainLoop::on_pace(std::int64_t step, double seconds_per_step) {
  stats_.step = step;
  // Images of all ranks.
  stats_.images_per_second = seconds_per_step > 0 ? o_.batch * run_.world_size() / seconds_per_step : 0;
  stats_.eta_seconds =
      train::remaining_seconds(seconds_per_step, o_.steps - step, o_.time_limit, train::seconds_this_run(run_.start));
}

void TrainLoop::on_log(const train::TrainingWindow& window, double seconds, double loader_wait_seconds) {
  const double mse = window.terms[kMseTerm], bpp = window.terms[kBppTerm];
  if (!trainer_.training_step().checks_every_step()) {  // CUDA: the window's means, read here without a per-step wait
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
                 {"images_per_second", seconds > 0 ? window.steps * o_.batch * run_.world_size() / seconds : 0.0},
                 {"loader_wait_seconds", loader_wait_seconds},
                 {"elapsed_seconds", run_.elapsed_seconds()}});
}

void TrainLoop::after_step() {
  if (run_.root) bar_.update(stats_);
}

bool TrainLoop::validates() const { return run_.images.validation != nullptr; }

double TrainLoop::validate() {
  const Validation v = validate_images(run_.net, run_.ctx, *run_.images.validation, run_.settings.stride, o_.val_images,
                                       run_.weight, run_.training_shape, run_.validation_level());
  if (run_.root) bar_.finish();
  spdlog::info("validation at step {}: PSNR {:.2f} dB, {:.4f} bpp over {} image(s) of '{}'", run_.step, v.psnr, v.bpp,
               v.images, o_.val);
  if (log_)
    log_->write({{"kind", "val"},
                 {"step", run_.step},
                 {"psnr", v.psnr},
                 {"bpp", v.bpp},
                 {"loss", v.loss},
                 {"images", v.images},
                 {"elapsed_seconds", run_.elapsed_seconds()}});
  double& best = run_.best_val_psnr;
  if (std::isfinite(best) && v.psnr < best - kPsnrCollapseDb)
    spdlog::warn("validation PSNR collapsed from {:.2f} dB (the best so far) to {:.2f} dB: training is diverging. "
                 "Try a lower --lr (now {}) or --clip-grad-norm (now {})",
                 best, v.psnr, run_.adam.learning_rate(), o_.clip_grad_norm);
  if (!std::isfinite(best) || v.psnr > best) best = v.psnr;
  return v.loss;
}

void TrainLoop::write_checkpoint() {
  plexus::save_checkpoint(run_.settings.checkpoint_path, run_.net, &run_.adam, run_.step, run_.checkpoint_metadata());
}

std::string TrainLoop::checkpoint_path() const { return run_.settings.checkpoint_path; }

void TrainLoop::on_diverged(const train::Divergence& d, const std::string& kept) {
  spdlog::error("training diverged: the loss is {} at step {} (mse {}, bpp {}); stopped without saving. {} "
                "Try a lower --lr (now {}) or check the data.",
                std::isnan(d.loss) ? "NaN" : "infinite", d.step, d.terms[kMseTerm], d.terms[kBppTerm], kept, o_.lr);
  warn_skipped_images(run_.images.train, "training");
}

void TrainLoop::on_stopped(int signal_number) {
  if (run_.root)
    spdlog::warn(
        "interrupted by {} after step {} of {}; saved '{}'. Continue with: plexus-ae train --out {} --resume{}",
        signal_number == SIGTERM ? "SIGTERM" : "Ctrl-C (SIGINT)", run_.step, o_.steps, run_.settings.checkpoint_path,
        o_.out, o_.gpus > 0 ? " --gpus N (any N)" : "");
  warn_skipped_images(run_.images.train, "training");
}

void TrainLoop::on_finished() {
  run_.write_model();
  std::printf(
      "trained %lld steps: loss %.4f, bpp %.4f, PSNR %.2f dB (moving average of the last steps, training noise)\n",
      static_cast<long long>(run_.step), stats_.loss, stats_.bpp, stats_.psnr);
  std::printf("model: %s\ncheckpoint: %s\nmetrics: %s\n", run_.settings.model_path.c_str(),
              run_.settings.checkpoint_path.c_str(), log_->path().c_str());
  warn_skipped_images(run_.images.train, "training");
  if (run_.images.validation) warn_skipped_images(*run_.images.validation, "validation");
}

}  // namespace plexus::ae

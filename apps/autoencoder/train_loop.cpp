#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/train/exit_codes.h"
#include "image_evaluation.h"
#include "plexus/checkpoint.h"
#include "plexus/data/patch_sampler.h"
#include "plexus/tensor_ops.h"
#include "plexus/error.h"
#include "plexus/train/run_clock.h"
#include "console.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

// A variable-rate model's training step (plexus/codec/autoencoder_contract.h):
// each step draws every patch's rate level k uniformly from the stream
// mix_seed(noise seed, 0, kRateLevelStream) and weights its MSE
// lambdas[k] / mean(lambdas) (the loss weight of "mse" being
// mean(lambdas) * 255^2): the hook TrainingStep::set_before_step takes.
constexpr std::uint64_t kRateLevelStream = 3;  // the patches' rate levels, from the step's noise seed

train::TrainingStep::BeforeStep draw_rate_levels(const std::vector<double>& lambdas) {
  std::vector<double> mse_weights;  // per level, lambdas[k] / mean(lambdas)
  const double mean = codec::variable_rate_lambda(lambdas);
  for (double lambda : lambdas) mse_weights.push_back(lambda / mean);
  return [mse_weights](Context& ctx, Net& net, std::int64_t, std::uint64_t noise_seed) {
    std::mt19937_64 generator(data::mix_seed(noise_seed, 0, kRateLevelStream));
    const auto patches = static_cast<std::size_t>(net.input(codec::kImage).dim(0));
    std::vector<double> levels(patches), weights(patches);
    for (std::size_t n = 0; n < patches; ++n) {
      const std::size_t k = static_cast<std::size_t>(generator() % mse_weights.size());
      levels[n] = static_cast<double>(k);
      weights[n] = mse_weights[k];
    }
    codec::set_rate_inputs(ctx, net, levels, weights);
  };
}

// A fall of this many dB in validation PSNR below the best so far is reported as divergence.
constexpr double kPsnrCollapseDb = 3.0;

struct Validation {
  double psnr = 0, bpp = 0, loss = 0;
  double ms_ssim = 0;  // NaN: no image large enough for MS-SSIM
  int images = 0;
  int ms_ssim_images = 0;  // of at least codec::kMsSsimMinSide pixels a side
};

// Mean PSNR, MS-SSIM and bpp over (up to `limit`) validation images in eval
// mode, and the loss: lambda * (the distortion terms of their means) + bpp;
// the net is put back to the training shape afterwards.
Validation validate_images(Net& net, Context& ctx, data::ImageFolder& images, int stride, int limit,
                           const codec::TrainingLoss& loss, double lambda, const Shape& training_shape, double level) {
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
    if (std::isnan(e.ms_ssim)) continue;
    v.ms_ssim += e.ms_ssim;
    ++v.ms_ssim_images;
  }
  net.reshape(codec::model_input_shapes(net.spec(), training_shape));
  if (v.images == 0) throw IoError("no validation image in '" + images.folder() + "' could be decoded");
  v.psnr /= v.images;
  v.bpp /= v.images;
  v.ms_ssim = v.ms_ssim_images > 0 ? v.ms_ssim / v.ms_ssim_images : std::nan("");
  const double ms_ssim_weight = loss.distortion_weight(codec::kMsSsim);
  v.loss = codec::distortion_weight(lambda * loss.distortion_weight(codec::kDistortion)) * mse / v.images + v.bpp;
  if (ms_ssim_weight > 0 && v.ms_ssim_images > 0) v.loss += lambda * ms_ssim_weight * (1.0 - v.ms_ssim);
  return v;
}

// The net validation runs: the training net itself, unless training added
// nodes to the spec (an MS-SSIM loss, which takes no image under
// codec::kMsSsimMinSide pixels a side): then a net of the model's own spec holding
// a copy of the training net's parameters, made for this validation.
std::unique_ptr<Net> validation_net(TrainingRun& run) {
  if (run.net.spec().nodes.size() == run.settings.spec.nodes.size()) return nullptr;
  const ModelSpec& spec = run.settings.spec;
  auto net = std::make_unique<Net>(spec, run.registry, codec::model_input_shapes(spec, run.training_shape), DType::f32,
                                   run.settings.device);
  std::map<std::string, Parameter*> trained;
  for (const NamedParameter& named : run.net.parameters()) trained[named.name] = named.parameter;
  run.ctx.synchronize();  // the last update is done
  for (const NamedParameter& named : net->parameters()) named.parameter->value.copy_from(trained.at(named.name)->value);
  return net;
}

// A metric for the log: null where it was not measured.
nlohmann::json measured(double value) { return std::isnan(value) ? nlohmann::json() : nlohmann::json(value); }

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

LossTerms loss_terms(const codec::TrainingLoss& loss, double lambda) {
  LossTerms terms;
  std::vector<train::LossTerm>& step = terms.step.terms;
  terms.step.input = codec::kImage;
  step.push_back({codec::kDistortion, codec::distortion_weight(lambda * loss.distortion_weight(codec::kDistortion))});
  double bpp_weight = 0;
  for (const codec::RateTerm& rate : loss.rate)
    if (rate.blob == codec::kRate) bpp_weight += rate.weight;
  step.push_back({codec::kRate, bpp_weight});
  for (const codec::RateTerm& rate : loss.rate)
    if (rate.blob != codec::kRate) step.push_back({rate.blob, rate.weight});
  const double ms_ssim_weight = loss.distortion_weight(codec::kMsSsim);
  if (ms_ssim_weight > 0) {
    terms.ms_ssim = step.size();
    step.push_back({codec::kMsSsim, -lambda * ms_ssim_weight});
    terms.offset = lambda * ms_ssim_weight;
  }
  if (step.size() > static_cast<std::size_t>(StepMetrics::kMaxTerms))
    throw ConfigError("the loss has " + std::to_string(step.size()) + " terms (mse, bpp, the other rate blobs" +
                      (terms.ms_ssim ? ", ms_ssim" : "") + "); a training step records at most " +
                      std::to_string(StepMetrics::kMaxTerms) + ": name fewer rate blobs in \"loss\"");
  return terms;
}

TrainLoop::TrainLoop(TrainingRun& run)
    : run_(run),
      o_(run.settings.options),
      log_(open_metrics_log(run)),
      loader_(run.images.train, patch_sampler(run), run.step, o_.threads, 2 * std::max(1, o_.threads) + 1,
              run.settings.device),
      bar_(stderr_is_terminal(), o_.log_every),
      terms_(loss_terms(run.settings.loss, run.lambda)),
      trainer_({run.net, run.adam, run.ctx, run.schedule, run.clipper.get(), run.parallel.get(), run.root, run.step,
                run.start, o_.resume},
               loader_, terms_.step, o_, *this) {
  if (run.settings.rate_levels > 0) trainer_.training_step().set_before_step(draw_rate_levels(o_.lambdas));
  stats_.total = o_.steps;
  if (!terms_.ms_ssim && o_.patch >= codec::kMsSsimMinSide && run.root)
    ms_ssim_monitor_ = run.registry.create("MSSSIM", codec::kMsSsim, nlohmann::json::object());
}

double TrainLoop::last_batch_ms_ssim() {
  if (!ms_ssim_monitor_) return std::nan("");
  const Tensor& x_hat = run_.net.blob(codec::kReconstruction);
  const Tensor& image = run_.net.blob(codec::kImage);
  if (!monitor_x_hat_.defined()) {
    monitor_x_hat_ = Tensor(x_hat.shape(), DType::f32, run_.settings.device);
    monitor_image_ = Tensor(image.shape(), DType::f32, run_.settings.device);
    monitor_value_ = Tensor(Shape{}, DType::f32, run_.settings.device);
  }
  // The blobs may be stored in bf16 (activation storage); MSSSIM computes in f32.
  convert(run_.ctx, monitor_x_hat_, x_hat);
  convert(run_.ctx, monitor_image_, image);
  ms_ssim_monitor_->forward(run_.ctx, {&monitor_x_hat_, &monitor_image_}, {&monitor_value_});
  return monitor_value_.to_values().at(0);
}

int TrainLoop::train() { return trainer_.train(); }

void TrainLoop::end_line() { bar_.finish(); }

void TrainLoop::on_step_values(const train::TrainingWindow& now) {
  smoothed_.add(now.last_loss + terms_.offset, now.last_terms[terms_.mse], now.last_terms[terms_.bpp],
                terms_.ms_ssim ? now.last_terms[*terms_.ms_ssim] : std::nan(""));
  stats_.loss = smoothed_.loss;
  stats_.bpp = smoothed_.bpp;
  stats_.psnr = psnr_of_mse(smoothed_.mse);
  if (!ms_ssim_monitor_) stats_.ms_ssim = smoothed_.ms_ssim;  // else the last logged batch's
}

void TrainLoop::on_pace(std::int64_t step, double seconds_per_step) {
  stats_.step = step;
  // Images of all ranks.
  stats_.images_per_second = seconds_per_step > 0 ? o_.batch * run_.world_size() / seconds_per_step : 0;
  stats_.eta_seconds =
      train::remaining_seconds(seconds_per_step, o_.steps - step, o_.time_limit, train::seconds_this_run(run_.start));
}

void TrainLoop::on_log(const train::TrainingWindow& window, double seconds, double loader_wait_seconds) {
  const double mse = window.terms[terms_.mse], bpp = window.terms[terms_.bpp];
  // MS-SSIM: the window's mean where the loss computes it, else the last step's batch (null for small patches).
  const double ms_ssim = terms_.ms_ssim ? window.terms[*terms_.ms_ssim] : last_batch_ms_ssim();
  const double loss = window.loss + terms_.offset;
  if (ms_ssim_monitor_) stats_.ms_ssim = ms_ssim;
  if (!trainer_.training_step().checks_every_step()) {  // CUDA: the window's means, read here without a per-step wait
    stats_.loss = loss;
    stats_.bpp = bpp;
    stats_.psnr = psnr_of_mse(mse);
    stats_.ms_ssim = ms_ssim;
  }
  if (log_)
    log_->write({{"kind", "train"},
                 {"step", run_.step},
                 {"loss", loss},
                 {"mse", mse},
                 {"bpp", bpp},
                 {"psnr", psnr_of_mse(mse)},
                 {"ms_ssim", measured(ms_ssim)},
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
  const std::unique_ptr<Net> separate = validation_net(run_);
  const Validation v =
      validate_images(separate ? *separate : run_.net, run_.ctx, *run_.images.validation, run_.settings.stride,
                      o_.val_images, run_.settings.loss, run_.lambda, run_.training_shape, run_.validation_level());
  if (run_.root) bar_.finish();
  spdlog::info("validation at step {}: PSNR {:.2f} dB, MS-SSIM {}, {:.4f} bpp over {} image(s) of '{}'", run_.step,
               v.psnr,
               v.ms_ssim_images > 0 ? fmt::format("{:.4f}", v.ms_ssim)
                                    : fmt::format("- (no image of {}+ pixels a side)", codec::kMsSsimMinSide),
               v.bpp, v.images, o_.val);
  if (log_)
    log_->write({{"kind", "val"},
                 {"step", run_.step},
                 {"psnr", v.psnr},
                 {"ms_ssim", measured(v.ms_ssim)},
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
  plexus::save_checkpoint(run_.settings.checkpoint_path, run_.net, &run_.adam, run_.step, run_.checkpoint_metadata(),
                          &run_.settings.spec);
}

std::string TrainLoop::checkpoint_path() const { return run_.settings.checkpoint_path; }

void TrainLoop::on_diverged(const train::Divergence& d, const std::string& kept) {
  spdlog::error("training diverged: the loss is {} at step {} (mse {}, bpp {}); stopped without saving. {} "
                "Try a lower --lr (now {}) or check the data.",
                std::isnan(d.loss) ? "NaN" : "infinite", d.step, d.terms[terms_.mse], d.terms[terms_.bpp], kept, o_.lr);
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
  const std::string ms_ssim =
      std::isnan(stats_.ms_ssim)
          ? ""
          : fmt::format(", MS-SSIM {:.4f}{}", stats_.ms_ssim, ms_ssim_monitor_ ? " of the last logged batch" : "");
  std::printf(
      "trained %lld steps: loss %.4f, bpp %.4f, PSNR %.2f dB%s (moving average of the last steps, training noise)\n",
      static_cast<long long>(run_.step), stats_.loss, stats_.bpp, stats_.psnr, ms_ssim.c_str());
  std::printf("model: %s\ncheckpoint: %s\nmetrics: %s\n", run_.settings.model_path.c_str(),
              run_.settings.checkpoint_path.c_str(), log_->path().c_str());
  warn_skipped_images(run_.images.train, "training");
  if (run_.images.validation) warn_skipped_images(*run_.images.validation, "validation");
}

}  // namespace plexus::ae

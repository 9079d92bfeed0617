// The training loop of `plexus-ae train`.
//
// Reproducibility: batch k (0-based) comes from PatchSampler(seed) at step
// k, and the noise of step k from a Context reseeded with
// mix_seed(seed, k, 1). Neither depends on what ran before, so a run resumed
// from a checkpoint at step k (parameters, Adam moments and step count
// restored) takes exactly the steps an uninterrupted run takes.
//
// Data-parallel (a worker of --gpus N, worker_launch.h): rank r takes crops
// [r B, (r + 1) B) of the global batch of step k, so the data sequence is
// the same for any number of ranks; rank 0 alone writes and reports.
//
// The steps themselves (TrainingStep) are enqueued without waiting for the
// GPU: the loss is read back once per log line, and divergence is looked up
// in a device-side record at log, validation, checkpoint and stop points
// (every step on the CPU, where it is free).
#include "train_command.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/codec_model.h"
#include "console.h"
#include "data_parallel.h"
#include "image_evaluation.h"
#include "lr_schedule.h"
#include "plexus/grad_clip.h"
#include "train_progress.h"
#include "metrics_log.h"
#include "model_catalog.h"
#include "output_folder.h"
#include "precision_option.h"
#include "plexus/checked_math.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/data/batch_loader.h"
#include "plexus/data/image_folder.h"
#include "plexus/distributed/replicas.h"
#include "plexus/error.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/tensor_ops.h"
#include "run_metadata.h"
#include "session.h"
#include "stop_signal.h"
#include "training_step.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

void check_values(const TrainOptions& o) {
  if (o.data.empty()) throw ConfigError("--data is required: a folder of training images (PNG/JPEG)");
  if (!(o.lambda > 0) || !std::isfinite(o.lambda)) throw ConfigError("--lambda must be > 0, got " + std::to_string(o.lambda));
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw ConfigError("--lr must be > 0, got " + std::to_string(o.lr));
  if (o.steps < 1 || o.steps > limits::kMaxSteps)
    throw ConfigError("--steps must be in [1, " + std::to_string(limits::kMaxSteps) + "], got " + std::to_string(o.steps));
  if (o.batch < 1 || o.batch > kMaxBatch)
    throw ConfigError("--batch must be in [1, " + std::to_string(kMaxBatch) + "], got " + std::to_string(o.batch));
  if (o.patch < 1 || o.patch > kMaxPatch)
    throw ConfigError("--patch must be in [1, " + std::to_string(kMaxPatch) + "], got " + std::to_string(o.patch));
  if (o.checkpoint_every < 0) throw ConfigError("--checkpoint-every must be >= 0, got " + std::to_string(o.checkpoint_every));
  if (o.log_every < 1) throw ConfigError("--log-every must be >= 1, got " + std::to_string(o.log_every));
  if (o.val_every < 1) throw ConfigError("--val-every must be >= 1, got " + std::to_string(o.val_every));
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw ConfigError("--threads must be in [0, " + std::to_string(kMaxThreads) + "], got " + std::to_string(o.threads));
  if (!(o.time_limit >= 0)) throw ConfigError("--time-limit must be >= 0 seconds, got " + std::to_string(o.time_limit));
  if (!(o.clip_grad_norm >= 0) || !std::isfinite(o.clip_grad_norm))
    throw ConfigError("--clip-grad-norm must be >= 0 (0: no clipping), got " + std::to_string(o.clip_grad_norm));
  if (o.replica_check_every < 0)
    throw ConfigError("--replica-check-every must be >= 0 (0: only at the end), got " +
                      std::to_string(o.replica_check_every));
}

// A fall of this many dB in validation PSNR below the best so far is reported as divergence.
constexpr double kPsnrCollapseDb = 3.0;

struct Validation {
  double psnr = 0, bpp = 0, loss = 0;
  int images = 0;
};

// Mean PSNR and bpp over (up to `limit`) validation images in eval mode;
// the net is put back to the training shape afterwards.
Validation validate(Net& net, Context& ctx, data::ImageFolder& images, int stride, int limit,
                    double weight, const Shape& training_shape) {
  Validation v;
  double mse = 0;
  const std::size_t count = limit > 0 ? std::min<std::size_t>(images.size(), limit) : images.size();
  for (std::size_t i = 0; i < count; ++i) {
    auto image = images.load(i);
    if (!image) continue;
    ImageEvaluation e = evaluate_image(net, ctx, *image, stride);
    v.psnr += e.psnr;
    v.bpp += e.bpp;
    mse += e.mse;
    ++v.images;
  }
  net.reshape({{kImage, training_shape}});
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

void report_skipped(const data::ImageFolder& images, const char* role) {
  const auto skipped = images.skipped();
  if (skipped.empty()) return;
  std::string list;
  for (const auto& path : skipped) list += "\n  " + path;
  spdlog::warn("{} {} image(s) in '{}' were skipped as unreadable:{}", skipped.size(), role, images.folder(), list);
}

}  // namespace

std::string default_train_out(const std::string& model) { return "runs/" + fs::path(model).stem().string(); }

int launch_train_workers(TrainOptions o, const std::vector<std::string>& arguments) {
  check_gpus_option(o);
  if (o.out.empty()) o.out = default_train_out(o.model);
  std::error_code error;
  fs::create_directories(o.out, error);
  if (error) throw IoError("cannot create the output folder '" + o.out + "': " + error.message());
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw IoError("cannot find this executable to start the workers (/proc/self/exe): " + error.message());
  std::vector<std::string> command{self.string()};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const std::string rendezvous = (fs::path(o.out) / (".rendezvous-" + std::to_string(getpid()))).string();
  return supervise_workers(command, o.gpus, rendezvous);
}

int run_train(TrainOptions o, const std::set<std::string>& given, const std::optional<WorkerEnvironment>& worker) {
  if (o.out.empty()) o.out = default_train_out(o.model);
  const fs::path out = o.out;
  const std::string checkpoint_path = (out / "checkpoint.safetensors").string();
  const std::string model_path = (out / "model.safetensors").string();
  // Rank 0 writes the output folder and reports; the other ranks only train.
  const bool root = !worker || worker->rank == 0;
  if (!root) spdlog::set_level(spdlog::level::warn);

  if (root) prepare_train_output(o);
  Registry registry = make_registry(o.plugins);

  // The model and settings: from the command line, or on --resume from the
  // checkpoint for everything not given again.
  std::optional<ModelSpec> spec;
  std::error_code error;
  TrainProgress saved_progress;
  if (o.resume && !o.init_from.empty())
    throw ConfigError("--init-from starts a new run from another model's weights; --resume continues this one from "
                      "its checkpoint: give one of them");
  if (o.resume) {
    if (!fs::exists(checkpoint_path, error))
      throw IoError("--resume: no checkpoint at '" + checkpoint_path + "' (train without --resume first, or check --out)");
    TensorFile saved = load_safetensors(checkpoint_path);
    apply_saved_settings(o, settings_from_checkpoint(saved, checkpoint_path), given);
    saved_progress = progress_from_checkpoint(saved);
    spec = given.count("model") ? resolve_model(o.model) : spec_from_checkpoint(saved, checkpoint_path, registry);
  } else {
    if (fs::exists(checkpoint_path, error))
      throw ConfigError("'" + o.out + "' already holds a checkpoint from an earlier run; pass --resume to continue it, "
                        "or choose another --out");
    spec = resolve_model(o.model);
  }
  check_values(o);
  check_contract(*spec);
  const int stride = derive_stride(*spec, registry);
  if (o.patch % stride != 0)
    throw ConfigError("--patch " + std::to_string(o.patch) + " is not a multiple of the model's stride " +
                      std::to_string(stride) + " (" + spec->source + "); try --patch " +
                      std::to_string(std::max(stride, (o.patch + stride / 2) / stride * stride)));
  const Device device = worker ? worker_device(o, *worker) : choose_device(o.device);
  const Precision precision = choose_precision(o.tf32 ? "tf32" : o.precision, device);

  data::ImageFolder train_images(o.data, data::ImageFolder::kDefaultCacheBytes, o.max_image_pixels, kPixelLimitHint);
  std::unique_ptr<data::ImageFolder> val_images;
  if (!o.val.empty())
    val_images = std::make_unique<data::ImageFolder>(o.val, data::ImageFolder::kDefaultCacheBytes, o.max_image_pixels,
                                                     kPixelLimitHint);

  if (root) {
    fs::create_directories(out, error);
    if (error) throw IoError("cannot create the output folder '" + o.out + "': " + error.message());
  }

  Context ctx(device, o.seed);
  ctx.set_precision(precision);
  const Shape training_shape{o.batch, 3, o.patch, o.patch};
  Net net(*spec, registry, {{kImage, training_shape}}, DType::f32, device, o.seed);
  Adam adam(o.lr);
  LrSchedule schedule(o);
  std::unique_ptr<GradientClipper> clipper;
  if (o.clip_grad_norm > 0) clipper = std::make_unique<GradientClipper>(o.clip_grad_norm);
  std::int64_t step = 0;
  if (!o.init_from.empty()) {
    const MatchingLoad init = load_matching_parameters(o.init_from, net);
    std::string missing;
    for (const std::string& name : init.missing) missing += (missing.empty() ? "" : ", ") + name;
    spdlog::info("--init-from '{}': {} tensor(s) loaded{}", o.init_from, init.loaded.size(),
                 missing.empty() ? std::string() : "; not in the file, kept as initialised: " + missing);
    if (init.loaded.empty())
      throw ConfigError("--init-from '" + o.init_from + "' holds no tensor named like a parameter of " +
                        (spec->name.empty() ? spec->source : spec->name) + "; is it a model of another architecture?");
  }
  if (o.resume) {
    step = load_checkpoint(checkpoint_path, net, &adam);
    // A new --lr given on --resume restarts the schedule from it.
    if (!given.count("lr")) schedule.restore(saved_progress.lr_schedule);
  }
  // Data-parallel: join the other ranks and start from rank 0's parameters.
  std::unique_ptr<DataParallelRank> parallel;
  if (worker) {
    parallel = std::make_unique<DataParallelRank>(*worker, device, o.rank_timeout);
    distributed::broadcast_parameters(ctx, parallel->communicator(), net.parameters());
  }
  const int world_size = parallel ? parallel->world_size() : 1;
  adam.set_learning_rate(schedule.rate_for_step(step));
  const double weight = distortion_weight(o.lambda);
  const std::string settings_text = train_settings(o, stride).dump();
  double best_val_psnr = saved_progress.best_val_psnr;
  // Training seconds of earlier runs of this --out (resumed runs continue the clock).
  const double earlier_seconds = saved_progress.elapsed_seconds;
  const auto run_start = std::chrono::steady_clock::now();
  auto elapsed_seconds = [&] {
    return earlier_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };
  auto metadata = [&] {
    TrainProgress progress{schedule.state(), elapsed_seconds(), best_val_psnr};
    return std::map<std::string, std::string>{{kTrainSettingsKey, settings_text},
                                              {kTrainProgressKey, progress_json(progress).dump()}};
  };

  spdlog::info("{} {} ({} parameters, stride {}) on {}: {} image(s) from '{}', batch {} of {}x{} patches{}, "
               "lambda {}, lr {}, {} steps{}; lr schedule {}, gradient norm clipped at {}",
               o.resume ? "resuming" : "training", spec->name.empty() ? spec->source : spec->name,
               net.parameter_count(), stride,
               world_size > 1 ? std::to_string(world_size) + " GPUs" : device.str(), train_images.size(), o.data,
               o.batch, o.patch, o.patch,
               world_size > 1 ? " per GPU (" + std::to_string(world_size * o.batch) + " per step)" : std::string(),
               o.lambda, adam.learning_rate(), o.steps, o.resume ? " from step " + std::to_string(step) : "",
               o.lr_schedule, o.clip_grad_norm > 0 ? fmt::format("{}", o.clip_grad_norm) : std::string("(off)"));
  if (o.lr_schedule == "plateau" && o.val.empty())
    spdlog::info("--lr-schedule plateau acts on validations: without --val the learning rate stays {}", o.lr);
  if (step >= o.steps) {
    if (!root) return kExitOk;
    save_checkpoint(model_path, net, nullptr, step, metadata());
    write_coding_tables(model_path, registry);
    spdlog::info("the checkpoint is already at step {} of --steps {}; wrote {}", step, o.steps, model_path);
    return kExitOk;
  }

  // Before the metrics log exists: once a run shows that it has started, a
  // Ctrl-C must save and stop it, never kill it.
  install_stop_handlers();
  std::unique_ptr<MetricsLog> log;
  if (root) log = std::make_unique<MetricsLog>((out / "metrics.jsonl").string(), o.resume ? step : -1);
  const data::Shard shard{parallel ? parallel->rank() : 0, world_size};
  data::BatchLoader loader(train_images, data::PatchSampler(o.seed, o.batch, o.patch, shard), step, o.threads,
                           2 * std::max(1, o.threads) + 1, device);
  ProgressBar bar(stderr_is_terminal(), o.log_every);
  std::int64_t last_good_checkpoint = o.resume ? step : -1;

  TrainingStep training(net, adam, ctx, loader, o.seed, weight, o.cuda_graph, step,
                        parallel ? &parallel->communicator() : nullptr);
  training.set_gradient_clipper(clipper.get());
  auto diverged = [&](const std::optional<Divergence>& d) {
    if (!d) return false;
    bar.finish();
    spdlog::error(
        "training diverged: the loss is {} at step {} (mse {}, bpp {}); stopped without saving. {} "
        "Try a lower --lr (now {}) or check the data.",
        std::isnan(d->loss) ? "NaN" : "infinite", d->step, d->mse, d->bpp,
        last_good_checkpoint >= 0 ? "The last good checkpoint, '" + checkpoint_path + "' at step " +
                                        std::to_string(last_good_checkpoint) + ", is kept."
                                  : std::string("No checkpoint had been saved yet."),
        o.lr);
    report_skipped(train_images, "training");
    return true;
  };

  auto save = [&](const char* why) {
    if (diverged(training.divergence())) return false;
    std::string culprit;
    if (!parameters_finite(ctx, net, &culprit)) {
      bar.finish();
      spdlog::error("training diverged: parameter '{}' is not finite after step {}; not saving the {} checkpoint. {}",
                    culprit, step, why,
                    last_good_checkpoint >= 0 ? "The last good checkpoint, '" + checkpoint_path + "' at step " +
                                                    std::to_string(last_good_checkpoint) + ", is kept."
                                              : std::string("No checkpoint had been saved yet."));
      return false;
    }
    if (root) save_checkpoint(checkpoint_path, net, &adam, step, metadata());
    last_good_checkpoint = step;
    return true;
  };

  // Window statistics between two log lines.
  auto window_start = std::chrono::steady_clock::now();
  double window_start_loader_wait = 0;  // training.seconds_waiting_for_loader() then
  double seconds_per_step = 0;  // exponential moving average
  SmoothedStats smoothed;       // what the progress line shows
  const std::int64_t first_step = step;
  StepStats stats;
  stats.total = o.steps;

  // --time-limit ends the run early, as if --steps had been reached.
  std::int64_t last_step = o.steps;
  auto out_of_time = [&] {
    return o.time_limit > 0 && seconds_this_run(run_start) >= o.time_limit;
  };
  // Data-parallel ranks decide alike: on rank 0's clock and on a stop
  // requested on any rank, agreed every kAgreementInterval steps.
  distributed::Agreement agreed;
  auto schedule_seconds = [&] { return parallel ? agreed.seconds : seconds_this_run(run_start); };

  while (step < last_step) {
    const auto step_start = std::chrono::steady_clock::now();
    adam.set_learning_rate(schedule.rate_for_step(step, schedule_seconds()));  // read by the optimiser's begin_step
    training.run(step);
    ++step;
    if (parallel && step % DataParallelRank::kAgreementInterval == 0)
      agreed = parallel->agree(ctx, stop_requested(), out_of_time(), seconds_this_run(run_start));
    if (training.checks_every_step()) {  // the CPU: free, so every step, as the progress line always did
      const TrainingWindow now = training.peek_window();
      if (diverged(now.divergence)) return kExitError;
      smoothed.add(now.last_loss, now.last_mse, now.last_bpp);
      stats.loss = smoothed.loss;
      stats.bpp = smoothed.bpp;
      stats.psnr = 10.0 * std::log10(1.0 / std::max(smoothed.mse, 1e-12));
    }
    if (step < last_step && (parallel ? agreed.out_of_time : out_of_time())) {
      last_step = step;
      bar.finish();
      spdlog::info("--time-limit of {} s reached after step {} of {}; finishing", o.time_limit, step, o.steps);
    }

    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    seconds_per_step = step == first_step + 1 ? step_seconds : 0.9 * seconds_per_step + 0.1 * step_seconds;
    stats.step = step;
    stats.images_per_second = seconds_per_step > 0 ? o.batch * world_size / seconds_per_step : 0;  // all ranks
    stats.eta_seconds = remaining_seconds(seconds_per_step, o.steps - step, o.time_limit, seconds_this_run(run_start));

    if (step % o.log_every == 0 || step == last_step) {
      const TrainingWindow window = training.read_window();
      if (diverged(window.divergence)) return kExitError;
      const auto now = std::chrono::steady_clock::now();
      const double window_seconds = std::chrono::duration<double>(now - window_start).count();
      if (!training.checks_every_step()) {  // CUDA: the window's means, read here without a per-step wait
        stats.loss = window.loss;
        stats.bpp = window.bpp;
        stats.psnr = 10.0 * std::log10(1.0 / std::max(window.mse, 1e-12));
      }
      if (log)
        log->write({{"kind", "train"},
                    {"step", step},
                    {"loss", window.loss},
                    {"mse", window.mse},
                    {"bpp", window.bpp},
                    {"psnr", 10.0 * std::log10(1.0 / std::max(window.mse, 1e-12))},
                    {"lr", adam.learning_rate()},
                    {"images_per_second", window_seconds > 0 ? window.steps * o.batch * world_size / window_seconds : 0.0},
                    {"loader_wait_seconds", training.seconds_waiting_for_loader() - window_start_loader_wait},
                    {"elapsed_seconds", elapsed_seconds()}});
      window_start = now;
      window_start_loader_wait = training.seconds_waiting_for_loader();
    }
    if (root) bar.update(stats);
    if (val_images && (step % o.val_every == 0 || step == last_step)) {
      if (diverged(training.divergence())) return kExitError;
      Validation v = validate(net, ctx, *val_images, stride, o.val_images, weight, training_shape);
      if (root) bar.finish();
      spdlog::info("validation at step {}: PSNR {:.2f} dB, {:.4f} bpp over {} image(s) of '{}'", step, v.psnr, v.bpp,
                   v.images, o.val);
      if (log)
        log->write({{"kind", "val"}, {"step", step}, {"psnr", v.psnr}, {"bpp", v.bpp}, {"loss", v.loss},
                    {"images", v.images}, {"elapsed_seconds", elapsed_seconds()}});
      if (std::isfinite(best_val_psnr) && v.psnr < best_val_psnr - kPsnrCollapseDb)
        spdlog::warn("validation PSNR collapsed from {:.2f} dB (the best so far) to {:.2f} dB: training is diverging. "
                     "Try a lower --lr (now {}) or --clip-grad-norm (now {})",
                     best_val_psnr, v.psnr, adam.learning_rate(), o.clip_grad_norm);
      if (!std::isfinite(best_val_psnr) || v.psnr > best_val_psnr) best_val_psnr = v.psnr;
      if (schedule.observe_validation(v.loss)) {
        spdlog::info("validation loss has not improved for {} validation(s): learning rate lowered to {}",
                     o.lr_patience, schedule.current_rate());
        adam.set_learning_rate(schedule.rate_for_step(step, schedule_seconds()));
      }
    }
    if (parallel && o.replica_check_every > 0 && step % o.replica_check_every == 0)
      distributed::check_replicas_agree(ctx, parallel->communicator(), net.parameters(), step);
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step < last_step) {
      if (!save("periodic")) return kExitError;
    }
    int signal_number = 0;
    const bool stop = parallel ? agreed.stop : stop_requested(&signal_number);
    if (stop) {
      if (parallel) stop_requested(&signal_number);  // this rank's own signal, if it got one
      bar.finish();
      if (!save("interrupted")) return kExitError;
      if (root)
        spdlog::warn("interrupted by {} after step {} of {}; saved '{}'. Continue with: plexus-ae train --out {} --resume{}",
                     signal_number == SIGTERM ? "SIGTERM" : "Ctrl-C (SIGINT)", step, o.steps, checkpoint_path, o.out,
                     o.gpus > 0 ? " --gpus N (any N)" : "");
      report_skipped(train_images, "training");
      return kExitInterrupted;
    }
  }
  bar.finish();
  if (parallel) distributed::check_replicas_agree(ctx, parallel->communicator(), net.parameters(), step);
  if (!save("final")) return kExitError;
  if (!root) return kExitOk;
  save_checkpoint(model_path, net, nullptr, step, metadata());
  write_coding_tables(model_path, registry);
  std::printf("trained %lld steps: loss %.4f, bpp %.4f, PSNR %.2f dB (moving average of the last steps, training noise)\n",
              static_cast<long long>(step), stats.loss, stats.bpp, stats.psnr);
  std::printf("model: %s\ncheckpoint: %s\nmetrics: %s\n", model_path.c_str(), checkpoint_path.c_str(),
              log->path().c_str());
  report_skipped(train_images, "training");
  if (val_images) report_skipped(*val_images, "validation");
  return kExitOk;
}

}  // namespace plexus::ae

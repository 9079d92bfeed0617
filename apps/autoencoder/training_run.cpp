#include "training_run.h"

#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/codec_model.h"
#include "model_catalog.h"
#include "output_folder.h"
#include "plexus/checked_math.h"
#include "plexus/checkpoint.h"
#include "plexus/distributed/replicas.h"
#include "plexus/error.h"
#include "plexus/train/run_clock.h"
#include "gpus_option.h"
#include "precision_option.h"
#include "session.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

// The values the run starts with, the command line's or the checkpoint's: every range of the table.
void check_values(const TrainOptions& o, const TrainOptionTable& table) {
  if (o.data.empty()) throw ConfigError("--data is required: a folder of training images (PNG/JPEG)");
  table.validate(o);
}

// --lambdas for a variable-rate model (as many as its rate levels, increasing), --lambda otherwise.
void check_lambdas(const TrainSettings& s) {
  const std::vector<double>& lambdas = s.options.lambdas;
  const int levels = s.rate_levels;
  if (levels == 0) {
    if (!lambdas.empty())
      throw ConfigError("--lambdas is for a variable-rate model (one with GainUnit nodes and a \"level\" input); " +
                        s.spec.source + " has one rate: give --lambda");
    return;
  }
  if (static_cast<int>(lambdas.size()) != levels)
    throw ConfigError(s.spec.source + " is a variable-rate model of " + std::to_string(levels) +
                      " rate levels: give --lambdas with " + std::to_string(levels) +
                      " values, one per level, "
                      "increasing (got " +
                      std::to_string(lambdas.size()) + ")");
  for (std::size_t k = 0; k < lambdas.size(); ++k) {
    if (!(lambdas[k] > 0) || !std::isfinite(lambdas[k]))
      throw ConfigError("--lambdas: value " + std::to_string(k + 1) + " must be > 0, got " +
                        std::to_string(lambdas[k]));
    if (k > 0 && !(lambdas[k] > lambdas[k - 1]))
      throw ConfigError("--lambdas must increase with the level (level 0 the lowest rate): value " +
                        std::to_string(k + 1) + " (" + std::to_string(lambdas[k]) + ") is not above value " +
                        std::to_string(k) + " (" + std::to_string(lambdas[k - 1]) + ")");
  }
}

void check_patch(const TrainSettings& s) {
  const int patch = s.options.patch, stride = s.stride;
  if (patch % stride != 0)
    throw ConfigError("--patch " + std::to_string(patch) + " is not a multiple of the model's stride " +
                      std::to_string(stride) + " (" + s.spec.source + "); try --patch " +
                      std::to_string(std::max(stride, (patch + stride / 2) / stride * stride)));
  const int smallest = codec::kMsSsimMinSide;
  if (s.loss.distortion_weight(codec::kMsSsim) > 0 && patch < smallest)
    throw ConfigError("--patch " + std::to_string(patch) + " is too small for the \"ms_ssim\" distortion of " +
                      s.spec.source + ": MS-SSIM's 5 scales need patches of at least " + std::to_string(smallest) +
                      " pixels; try --patch " + std::to_string((smallest + stride - 1) / stride * stride));
}

// --distortion: the spec's "loss" distortion terms replaced by one of that type.
void apply_distortion_option(TrainSettings& s) {
  const std::string& distortion = s.options.distortion;
  if (distortion.empty()) return;
  if (distortion != codec::kDistortion && distortion != codec::kMsSsim)
    throw ConfigError("--distortion must be mse or ms_ssim, got '" + distortion + "'");
  if (!s.spec.loss.is_object()) s.spec.loss = nlohmann::json::object();
  s.spec.loss["distortion"] = nlohmann::json::array({{{"type", distortion}, {"weight", 1}}});
}

// The spec's "lambda" and "lambdas" where the command line gives none (a
// resumed run keeps the values its checkpoint recorded).
void apply_spec_lambdas(TrainSettings& s, const std::set<std::string>& given) {
  if (s.options.resume) return;
  if (s.loss.lambda > 0 && !given.count("lambda")) s.options.lambda = s.loss.lambda;
  if (!s.loss.lambdas.empty() && !given.count("lambdas")) s.options.lambdas = s.loss.lambdas;
}

// --resume: the checkpoint's settings for every option not in `given`, its
// model unless --model is given again, and its record of the earlier runs.
void read_checkpoint_settings(TrainSettings& s, const TrainOptionTable& table, const std::set<std::string>& given,
                              const Registry& registry) {
  std::error_code error;
  if (!fs::exists(s.checkpoint_path, error))
    throw IoError("--resume: no checkpoint at '" + s.checkpoint_path +
                  "' (train without --resume first, or check --out)");
  TensorFile saved = load_safetensors(s.checkpoint_path);
  table.restore(s.options, train::settings_from_checkpoint(saved, s.checkpoint_path, kTrainRunKeys, table), given);
  s.earlier = train::progress_from_checkpoint(saved, s.checkpoint_path, kTrainRunKeys);
  s.spec =
      given.count("model") ? resolve_model(s.options.model) : spec_from_checkpoint(saved, s.checkpoint_path, registry);
}

// --init-from: every parameter of `net` named and shaped like a tensor of the file.
void load_initial_weights(const std::string& path, Net& net, const std::string& model_name) {
  const MatchingLoad init = load_matching_parameters(path, net);
  std::string missing;
  for (const std::string& name : init.missing) missing += (missing.empty() ? "" : ", ") + name;
  spdlog::info("--init-from '{}': {} tensor(s) loaded{}", path, init.loaded.size(),
               missing.empty() ? std::string() : "; not in the file, kept as initialised: " + missing);
  if (init.loaded.empty())
    throw ConfigError("--init-from '" + path + "' holds no tensor named like a parameter of " + model_name +
                      "; is it a model of another architecture?");
}

std::unique_ptr<data::ImageFolder> open_validation_images(const TrainOptions& o) {
  if (o.val.empty()) return nullptr;
  return std::make_unique<data::ImageFolder>(o.val, data::ImageFolder::kDefaultCacheBytes, o.max_image_pixels,
                                             kPixelLimitHint);
}

// " on 1 - MS-SSIM" and the like; nothing for the default, 255^2 * MSE alone.
std::string distortion_description(const codec::TrainingLoss& loss) {
  if (loss.distortion.size() == 1 && loss.distortion[0].type == codec::kDistortion && loss.distortion[0].weight == 1)
    return "";
  std::string terms;
  for (const codec::DistortionTerm& term : loss.distortion)
    terms += (terms.empty() ? "" : " + ") + (term.weight == 1 ? std::string() : fmt::format("{} * ", term.weight)) +
             (term.type == codec::kMsSsim ? "(1 - MS-SSIM)" : "255^2 * MSE");
  return " on " + terms;
}

}  // namespace

std::string TrainSettings::model_name() const { return spec.name.empty() ? spec.source : spec.name; }

double TrainSettings::loss_lambda() const {
  return rate_levels == 0 ? options.lambda : codec::variable_rate_lambda(options.lambdas);
}

TrainSettings resolve_train_settings(TrainOptions options, const TrainOptionTable& table,
                                     const std::set<std::string>& given, const Registry& registry,
                                     const std::optional<train::WorkerEnvironment>& worker) {
  TrainSettings s;
  s.options = std::move(options);
  const TrainOptions& o = s.options;
  s.checkpoint_path = (fs::path(o.out) / "checkpoint.safetensors").string();
  s.model_path = (fs::path(o.out) / "model.safetensors").string();
  if (o.resume && !o.init_from.empty())
    throw ConfigError("--init-from starts a new run from another model's weights; --resume continues this one from "
                      "its checkpoint: give one of them");
  // Fine-tuning a trained model at a new run's learning rate undoes much of
  // its training in the first steps (the shipped bls2017 lost 1.1 dB in 50),
  // so --init-from without --lr starts at a tenth of it.
  if (!o.init_from.empty() && !given.count(train::kLrOption)) {
    s.options.lr *= kInitFromLrFactor;
    spdlog::info("--init-from: learning rate {:g}, a tenth of a new run's (give --lr to choose another)", o.lr);
  }
  std::error_code error;
  if (o.resume) {
    read_checkpoint_settings(s, table, given, registry);
  } else {
    if (fs::exists(s.checkpoint_path, error))
      throw ConfigError("'" + o.out +
                        "' already holds a checkpoint from an earlier run; pass --resume to continue it, "
                        "or choose another --out");
    s.spec = resolve_model(o.model);
  }
  codec::check_contract(s.spec);
  apply_distortion_option(s);
  s.loss = codec::training_loss(s.spec);
  apply_spec_lambdas(s, given);
  check_values(o, table);
  s.rate_levels = codec::rate_levels(s.spec);
  check_lambdas(s);
  s.stride = codec::derive_stride(s.spec, registry);
  check_patch(s);
  s.device = worker ? worker_device(o, *worker) : choose_device(o.device);
  s.precision = choose_precision(o.tf32 ? "tf32" : o.precision, s.device);
  return s;
}

TrainingImages::TrainingImages(const TrainOptions& o)
    : train(o.data, data::ImageFolder::kDefaultCacheBytes, o.max_image_pixels, kPixelLimitHint),
      validation(open_validation_images(o)) {}

TrainingRun::TrainingRun(const TrainSettings& settings, const TrainOptionTable& table, const Registry& registry,
                         TrainingImages& images, bool root, const std::set<std::string>& given,
                         const std::optional<train::WorkerEnvironment>& worker)
    : settings(settings),
      registry(registry),
      images(images),
      root(root),
      ctx(settings.device, settings.options.seed),
      training_shape{settings.options.batch, 3, settings.options.patch, settings.options.patch},
      net(codec::training_spec(settings.spec, settings.loss), registry,
          codec::model_input_shapes(settings.spec, training_shape), DType::f32, settings.device, settings.options.seed),
      adam(settings.options.lr),
      schedule(settings.options),
      clipper(settings.options.clip_grad_norm > 0 ? std::make_unique<GradientClipper>(settings.options.clip_grad_norm)
                                                  : nullptr),
      lambda(settings.loss_lambda()),
      settings_text(train_settings(table, settings.options, settings.stride).dump()),
      best_val_psnr(settings.earlier.best_validation) {
  const TrainOptions& o = settings.options;
  ctx.set_precision(settings.precision);
  net.set_activation_storage(activation_storage_for(settings.precision, settings.device, ctx.kernel_settings()));
  net.set_activation_fusion(activation_fusion_for_training(ctx.kernel_settings()));
  if (!o.init_from.empty()) load_initial_weights(o.init_from, net, settings.model_name());
  if (o.resume) {
    step = load_checkpoint(settings.checkpoint_path, net, &adam);
    // A new --lr given on --resume restarts the schedule from it.
    if (!given.count(train::kLrOption)) schedule.restore(settings.earlier.lr_schedule);
  }
  // Data-parallel: join the other ranks and start from rank 0's parameters.
  if (worker) {
    parallel = std::make_unique<train::DataParallelRank>(*worker, settings.device, o.rank_timeout);
    distributed::broadcast_parameters(ctx, parallel->communicator(), net.parameters());
  }
  adam.set_learning_rate(schedule.rate_for_step(step));
  start = std::chrono::steady_clock::now();
}

double TrainingRun::elapsed_seconds() const {
  return settings.earlier.elapsed_seconds + train::seconds_this_run(start);
}

std::map<std::string, std::string> TrainingRun::checkpoint_metadata() const {
  const train::RunProgress progress{schedule.state(), elapsed_seconds(), best_val_psnr};
  return {{kTrainRunKeys.settings, settings_text}, {kTrainRunKeys.progress, train::progress_json(progress).dump()}};
}

void TrainingRun::log_start() const {
  const TrainOptions& o = settings.options;
  const int ranks = world_size();
  const std::string per_rank = settings.device.is_cpu() ? "CPU ranks" : "GPUs";
  spdlog::info(
      "{} {} ({} parameters, stride {}) on {}: {} image(s) from '{}', batch {} of {}x{} patches{}, "
      "lambda {}{}, lr {}, {} steps{}; lr schedule {}, gradient norm clipped at {}",
      o.resume ? "resuming" : "training", settings.model_name(), net.parameter_count(), settings.stride,
      ranks > 1 ? std::to_string(ranks) + " " + per_rank : settings.device.str(), images.train.size(), o.data, o.batch,
      o.patch, o.patch,
      ranks > 1
          ? (settings.device.is_cpu() ? " per rank (" : " per GPU (") + std::to_string(ranks * o.batch) + " per step)"
          : std::string(),
      settings.rate_levels > 0 ? nlohmann::json(o.lambdas).dump() + " (one per rate level; \"mse\" in the "
                                                                    "log is weighted lambda_level / their mean)"
                               : fmt::format("{}", o.lambda),
      distortion_description(settings.loss), adam.learning_rate(), o.steps,
      o.resume ? " from step " + std::to_string(step) : "", o.lr_schedule,
      o.clip_grad_norm > 0 ? fmt::format("{}", o.clip_grad_norm) : std::string("(off)"));
  if (net.activation_storage() == DType::bf16)
    spdlog::info("activations: {} of {} blobs stored in bf16, the rest in f32 (PLEXUS_BF16_STORAGE=0 keeps all f32)",
                 net.bf16_blob_count(), net.blob_count());
  if (net.fused_activation_count() > 0)
    spdlog::info("activations: {} ReLU/LeakyReLU applied by the convolution or Add before them "
                 "(PLEXUS_FUSE_ACTIVATIONS=0 runs them apart)",
                 net.fused_activation_count());
  if (o.lr_schedule == "plateau" && o.val.empty())
    spdlog::info("--lr-schedule plateau acts on validations: without --val the learning rate stays {}", o.lr);
  // Named before the first step rather than when compress or export refuses the finished model.
  const std::optional<std::string> reason = root ? codec::why_not_codable(settings.spec, registry) : std::nullopt;
  if (reason)
    spdlog::warn("model '{}' trains, but compress/export cannot code it yet: {}", settings.model_name(), *reason);
}

void TrainingRun::write_model() {
  save_checkpoint(settings.model_path, net, nullptr, step, checkpoint_metadata(), &settings.spec);
  codec::write_coding_tables(settings.model_path, registry);
}

}  // namespace plexus::ae

#include "train_options.h"

#include <limits>

#include "plexus/train/trainer_options.h"
#include "precision_option.h"
#include "session.h"

namespace plexus::ae {

const train::RunMetadataKeys kTrainRunKeys{"plexus_ae.train", "plexus_ae.progress", "plexus-ae train"};

TrainOptionTable train_option_table(const std::string& bundled_models) {
  using train::Bounds;
  using O = TrainOptions;
  TrainOptionTable t;
  t.add("data", &O::data,
        "folder of training images, PNG/JPEG, searched recursively (required; on --resume taken from the checkpoint)")
      .changes_the_run()
      .type("DIR");
  t.add("val", &O::val, "folder of validation images, evaluated at full size every --val-every steps and at the end")
      .may_change_on_resume()
      .type("DIR");
  t.add("model", &O::model, "a bundled model (" + bundled_models + ") or a JSON model spec file")
      .changes_the_run()
      .type("NAME|FILE");
  t.add("lambda", &O::lambda,
        "rate-distortion trade-off: loss = lambda * D + bpp, D = 255^2 * MSE or 1 - MS-SSIM (the spec's \"loss\" "
        "says which, and may set lambda; this option wins)")
      .changes_the_run()
      .range(Bounds::above(0).finite_only());
  t.add("distortion", &O::distortion,
        "mse or ms_ssim: the distortion D the model trains with, in place of its spec's \"loss\", which the "
        "checkpoint records (MS-SSIM needs --patch of 161 or more; CompressAI's lambdas for it: 2.4 to 60.5)")
      .type("D");
  t.add("lambdas", &O::lambdas,
        "a variable-rate model's trade-offs, one per rate level, increasing (e.g. "
        "0.0018,0.0035,0.0067,0.013,0.025,0.0483): each patch trains at a level drawn at random, with its lambda")
      .changes_the_run()
      .range(Bounds::above(0).finite_only())
      .type("L0,L1,...");
  train::add_step_options(t);
  t.add("patch", &O::patch, "patch side in pixels; a multiple of the model's stride (16 for the bundled models)")
      .changes_the_run()
      .range(Bounds::in(1, kMaxPatch));
  train::add_trainer_options(t);
  t.add("device", &O::device, "cpu, cuda, cuda:N or auto (CUDA when a GPU is visible)").type("DEVICE");
  t.add("out", &O::out,
        "output folder: checkpoint.safetensors, model.safetensors, metrics.jsonl (default: runs/<model name>)")
      .type("DIR");
  t.add("init-from", &O::init_from,
        "start from the weights of this model or checkpoint: every parameter of the same name and shape is copied "
        "(the others keep their initial values and are listed); --lr then defaults to a tenth of its default, for "
        "fine-tuning; not with --resume")
      .type("FILE");
  t.add("resume", &O::resume, "continue from <out>/checkpoint.safetensors with its optimiser state and settings");
  t.add("val-images", &O::val_images, "validate on at most this many images of --val (0: all)")
      .may_change_on_resume()
      .range(Bounds::at_least(0).saved_at_most(std::numeric_limits<int>::max()));
  t.add("plugin", &O::plugins, "a layer plugin .so to load (repeatable; PLEXUS_PLUGIN_PATH is also read)").type("FILE");
  t.add("threads", &O::threads,
        "background threads decoding and cropping images (default: CPU cores - 1, at most 8; 0: decode in the "
        "training thread)")
      .range(Bounds::in(0, kMaxThreads));
  t.add("cpu-threads", &O::cpu_threads,
        "threads the CPU kernels use (0: every core); results are the same for any count");
  t.add("overwrite", &O::overwrite,
        "start a new run in an --out that holds the model and metrics of an earlier one, replacing them");
  t.add("max-image-pixels", &O::max_image_pixels,
        "skip (with a warning) images of more pixels than this, read from the header before decoding (1 to 2^40)")
      .type("PIXELS")
      .range_checked_when_parsed(Bounds::in(1, static_cast<double>(kMaxImagePixelsOption)));
  t.add("precision", &O::precision, kTrainPrecisionHelp).one_of({"f32", "tf32", "bf16"});
  t.add("tf32", &O::tf32, "deprecated: the same as --precision tf32");
  return t;
}

nlohmann::json train_settings(const TrainOptionTable& table, const TrainOptions& options, int stride) {
  nlohmann::json settings = table.save(options);
  settings["stride"] = stride;  // read by nothing on --resume: the model's, for whoever inspects the checkpoint
  return settings;
}

}  // namespace plexus::ae

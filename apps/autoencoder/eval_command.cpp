// `plexus-ae eval`: its options, and the command in two jobs: evaluate every image (the net's estimate,
// the real codec's file, the reconstruction), then report the results (the
// table's mean line and, with --out, eval.json).
#include "eval_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/train/exit_codes.h"
#include "image_evaluation.h"
#include "output_folder.h"
#include "plexus/atomic_file.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/data/image_folder.h"
#include "plexus/error.h"
#include "plexus/net.h"
#include "precision_option.h"
#include "plexus/checkpoint.h"
#include "plexus/model_spec.h"
#include "session.h"
#include "console.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

// One image's results: the entropy model's estimate and, when the model
// can be used as a codec, the real file's. MS-SSIM is NaN for an image
// under codec::kMsSsimMinSide pixels a side.
struct ImageResult {
  std::string name;  // relative to --data
  int width = 0, height = 0;
  double psnr = 0, bpp = 0, ms_ssim = 0;
  std::optional<CodecEvaluation> file;
  std::string reconstruction;  // the PNG written under --out; empty without --out
};

struct EvalResults {
  std::vector<ImageResult> images;
  double mean_psnr = 0, mean_bpp = 0;
  double mean_ms_ssim = 0;                   // over the images large enough for it; NaN: none
  std::optional<CodecEvaluation> mean_file;  // with the codec: the means of the files' values
};

// The net of the --model file in eval mode, and the real codec when the
// model can be used as one; both with the same precision policy.
struct Evaluator {
  Evaluator(const EvalOptions& o, const ModelSpec& spec, const Registry& registry, int stride, Device device,
            Precision precision)
      : contexts(spec, registry),
        net(contexts.empty() ? spec : contexts.spec(), registry,
            contexts.empty() ? codec::model_input_shapes(spec, Shape{1, 3, stride, stride})
                             : contexts.input_shapes(Shape{1, 3, stride, stride}),
            DType::f32, device, 0, InitialParameters::for_loading),
        step(load_checkpoint(o.model, net, nullptr)),
        ctx(device, 0),
        codec(codec_for_eval(o.model, registry, device)),
        stride(stride),
        level(std::max(0.0, o.level)) {
    ctx.set_training(false);
    ctx.set_precision(precision);
    if (codec) codec->set_precision(precision);
    if (codec && codec->rate_levels() > 0) codec->set_rate_level(level);
  }
  // A model whose context reads its decoded latent runs with it (as the codec decodes it, with the codec).
  const DecodedContexts contexts;
  Net net;
  const std::int64_t step;  // of the --model file
  Context ctx;
  std::unique_ptr<codec::CodecModel> codec;
  const int stride;
  const double level;  // a variable-rate model's rate level
};

// Where each reconstruction goes: <out>/<relative path>.png, or <out>/<relative
// path with its extension>.png when another input already took that name
// (a.jpg next to a.png).
class ReconstructionWriter {
 public:
  explicit ReconstructionWriter(std::string out) : out_(std::move(out)) {}
  // Writes the PNG and returns its path.
  std::string write(const std::string& name, const data::Image& reconstruction) {
    fs::path target = fs::path(out_) / fs::path(name).replace_extension(".png");
    if (!written_.insert(target.string()).second) target = fs::path(out_) / (name + ".png");
    written_.insert(target.string());
    std::error_code error;
    fs::create_directories(target.parent_path(), error);
    data::write_png(target.string(), reconstruction);
    return target.string();
  }

 private:
  std::string out_;
  std::set<std::string> written_;
};

// The table on stdout: a row per image as it is evaluated, then the means.
class ResultTable {
 public:
  // Prints the header.
  ResultTable(const data::ImageFolder& images, bool with_file) : with_file_(with_file) {
    std::size_t width = 5;
    for (std::size_t i = 0; i < images.size(); ++i) width = std::max(width, images.relative_path(i).size());
    name_width_ = static_cast<int>(width);
    std::printf("%-*s  %9s  %9s  %7s  %7s", name_width_, "image", "size", "PSNR dB", "bpp", "MS-SSIM");
    if (with_file_)
      std::printf("  %8s  %8s  %12s  %7s  %7s", "file bpp", "file dB", "file MS-SSIM", "enc ms", "dec ms");
    std::printf("\n");
  }
  void print_row(const ImageResult& r) {
    const std::string size = std::to_string(r.width) + "x" + std::to_string(r.height);
    print_line(r.name, size, r.psnr, r.bpp, r.ms_ssim, r.file);
  }
  void print_means(const EvalResults& results) {
    print_line("mean", "n=" + std::to_string(results.images.size()), results.mean_psnr, results.mean_bpp,
               results.mean_ms_ssim, results.mean_file);
  }

 private:
  // "-" for an MS-SSIM not measured (an image too small for it).
  static std::string ms_ssim_text(double value, int width) {
    char text[32];
    if (std::isnan(value)) std::snprintf(text, sizeof text, "%*s", width, "-");
    else std::snprintf(text, sizeof text, "%*.4f", width, value);
    return text;
  }
  void print_line(const std::string& name, const std::string& size, double psnr, double bpp, double ms_ssim,
                  const std::optional<CodecEvaluation>& file) {
    std::printf("%-*s  %9s  %9.3f  %7.4f  %s", name_width_, name.c_str(), size.c_str(), psnr, bpp,
                ms_ssim_text(ms_ssim, 7).c_str());
    if (file)
      std::printf("  %8.4f  %8.3f  %s  %7.1f  %7.1f", file->bpp, file->psnr, ms_ssim_text(file->ms_ssim, 12).c_str(),
                  file->encode_ms, file->decode_ms);
    std::printf("\n");
    std::fflush(stdout);
  }
  bool with_file_;
  int name_width_ = 0;
};

// The means over the images (summed in their order), and of the files' values when `with_file`.
void compute_means(EvalResults& results, bool with_file, const std::string& data) {
  const int count = static_cast<int>(results.images.size());
  if (count == 0) throw IoError("no image in '" + data + "' could be decoded (see the warnings above)");
  double psnr_sum = 0, bpp_sum = 0, ms_ssim_sum = 0;
  int ms_ssim_count = 0;
  CodecEvaluation file_sum;
  for (const ImageResult& r : results.images) {
    psnr_sum += r.psnr;
    bpp_sum += r.bpp;
    if (!std::isnan(r.ms_ssim)) {
      ms_ssim_sum += r.ms_ssim;
      ++ms_ssim_count;
    }
    if (!r.file) continue;
    file_sum.bpp += r.file->bpp;
    file_sum.psnr += r.file->psnr;
    if (!std::isnan(r.file->ms_ssim)) file_sum.ms_ssim += r.file->ms_ssim;
    file_sum.encode_ms += r.file->encode_ms;
    file_sum.decode_ms += r.file->decode_ms;
  }
  results.mean_psnr = psnr_sum / count;
  results.mean_bpp = bpp_sum / count;
  // The same images measure MS-SSIM for the net and for the file (those large enough).
  results.mean_ms_ssim = ms_ssim_count > 0 ? ms_ssim_sum / ms_ssim_count : std::nan("");
  if (with_file) {
    CodecEvaluation mean;
    mean.bpp = file_sum.bpp / count;
    mean.psnr = file_sum.psnr / count;
    mean.ms_ssim = ms_ssim_count > 0 ? file_sum.ms_ssim / ms_ssim_count : std::nan("");
    mean.encode_ms = file_sum.encode_ms / count;
    mean.decode_ms = file_sum.decode_ms / count;
    results.mean_file = mean;
  }
}

// Every readable image of `images` through the evaluator; `evaluated` is
// called with each image's results as they come, before its reconstruction
// is written under `out` (none without --out).
EvalResults evaluate_images(Evaluator& evaluator, data::ImageFolder& images, const std::string& out,
                            const std::function<void(const ImageResult&)>& evaluated) {
  EvalResults results;
  std::optional<ReconstructionWriter> writer;
  if (!out.empty()) writer.emplace(out);
  for (std::size_t i = 0; i < images.size(); ++i) {
    auto image = images.load(i);
    if (!image) continue;
    ImageResult result;
    result.name = images.relative_path(i);
    result.width = image->width;
    result.height = image->height;
    Tensor decoded;  // the latent of the image's file, for a model whose context reads it
    if (evaluator.codec)
      result.file = evaluate_codec(*evaluator.codec, *image, evaluator.contexts.empty() ? nullptr : &decoded);
    ImageEvaluation e = evaluate_image(evaluator.net, evaluator.ctx, *image, evaluator.stride, evaluator.level,
                                       &evaluator.contexts, decoded.defined() ? &decoded : nullptr);
    result.psnr = e.psnr;
    result.bpp = e.bpp;
    result.ms_ssim = e.ms_ssim;
    evaluated(result);
    if (writer) result.reconstruction = writer->write(result.name, e.reconstruction);
    results.images.push_back(std::move(result));
  }
  return results;
}

// A value for eval.json: null where it was not measured (MS-SSIM of a small image).
nlohmann::json measured(double value) { return std::isnan(value) ? nlohmann::json() : nlohmann::json(value); }

nlohmann::json file_json(const CodecEvaluation& file, bool with_bytes) {
  nlohmann::json json{{"bpp", file.bpp},
                      {"psnr", file.psnr},
                      {"ms_ssim", measured(file.ms_ssim)},
                      {"encode_ms", file.encode_ms},
                      {"decode_ms", file.decode_ms}};
  if (with_bytes) json["bytes"] = file.bytes;
  return json;
}

// <out>/eval.json: every image's results and the means.
void write_report(const EvalOptions& o, std::int64_t step, const EvalResults& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ImageResult& r : results.images) {
    nlohmann::json row{{"image", r.name}, {"width", r.width}, {"height", r.height},
                       {"psnr", r.psnr},  {"bpp", r.bpp},     {"ms_ssim", measured(r.ms_ssim)}};
    if (r.file) row["file"] = file_json(*r.file, true);
    if (!r.reconstruction.empty()) row["reconstruction"] = r.reconstruction;
    rows.push_back(row);
  }
  nlohmann::json report{{"model", o.model},
                        {"step", step},
                        {"data", o.data},
                        {"images", rows},
                        {"mean_psnr", results.mean_psnr},
                        {"mean_bpp", results.mean_bpp},
                        {"mean_ms_ssim", measured(results.mean_ms_ssim)}};
  if (results.mean_file) report["mean_file"] = file_json(*results.mean_file, false);
  if (o.level >= 0) report["level"] = o.level;
  // File names need not be UTF-8: replace what JSON cannot hold rather than fail.
  write_file_atomically((fs::path(o.out) / "eval.json").string(),
                        report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + '\n',
                        "the evaluation results");
  spdlog::info("reconstructions and eval.json written to '{}'", o.out);
}

void add_eval_options(CLI::App& eval, EvalOptions& o) {
  eval.add_option("--model", o.model,
                  "model.safetensors or checkpoint.safetensors written by plexus-ae train (it carries its model spec)")
      ->required()
      ->type_name("FILE");
  eval.add_option("--data", o.data, "folder of images to evaluate at full size, PNG/JPEG, searched recursively")
      ->required()
      ->type_name("DIR");
  eval.add_option("--out", o.out, "write reconstructions as PNG and eval.json here")->type_name("DIR");
  eval.add_option("--device", o.device, "cpu, cuda, cuda:N or auto")->type_name("DEVICE");
  eval.add_option("--plugin", o.plugins,
                  "a layer plugin .so the model needs (repeatable; PLEXUS_PLUGIN_PATH is also read)")
      ->type_name("FILE");
  add_max_image_pixels_option(eval, o.max_image_pixels,
                              "skip (with a warning) images of more pixels than this, read from the header before "
                              "decoding");
  eval.add_option("--cpu-threads", o.cpu_threads, "threads the CPU kernels use (0: every core)");
  eval.add_option("--precision", o.precision, kEvalPrecisionHelp)->check(CLI::IsMember({"f32", "tf32", "bf16"}));
  eval.add_option("--level", o.level,
                  "a variable-rate model's rate level, 0 (the lowest rate) to K-1 (required for one; "
                  "fractional levels interpolate)")
      ->type_name("L")
      ->check(CLI::Range(0.0, 1000.0).description(""))
      ->default_str("");  // not given (o.level < 0), which is no level
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* command =
      app.add_subcommand("eval", "evaluate a trained model: PSNR, MS-SSIM and bits per pixel per image");
  command->option_defaults()->always_capture_default();
  add_eval_options(*command, *options);
  command->footer("Examples:\n"
                  "  plexus-ae eval --model runs/demo/model.safetensors --data data/eval-sample\n"
                  "  plexus-ae eval --model runs/demo/checkpoint.safetensors --data kodak --out recon --device cpu\n"
                  "Images are padded (edge pixels repeated) to a multiple of the model's stride and cropped back;\n"
                  "bpp is the entropy model's estimate for the rounded latent, divided by the original pixel count;\n"
                  "a context that reads the decoded latent (checkerboard, autoregressive) reads the file's.");
  command->callback([options, &exit_code] {
    use_cpu_threads(options->cpu_threads);
    exit_code = run_eval(*options);
  });
}

int run_eval(const EvalOptions& o) {
  if (o.model.empty()) throw ConfigError("--model is required: a .safetensors file written by plexus-ae train");
  if (o.data.empty()) throw ConfigError("--data is required: a folder of images to evaluate");
  Registry registry = make_registry(o.plugins);
  std::error_code error;
  if (!fs::exists(o.model, error)) throw IoError("model file '" + o.model + "' does not exist");
  const ModelSpec spec = spec_from_checkpoint(load_safetensors(o.model), o.model, registry);
  codec::check_contract(spec);
  const int stride = codec::derive_stride(spec, registry);
  const int levels = codec::rate_levels(spec);
  if (levels > 0 && !(o.level >= 0 && o.level <= levels - 1))
    throw ConfigError("'" + o.model + "' is a variable-rate model of " + std::to_string(levels) +
                      " rate levels: give " + "--level, 0 (the lowest rate) to " + std::to_string(levels - 1) +
                      (o.level >= 0 ? " (got " + std::to_string(o.level) + ")" : std::string()));
  if (levels == 0 && o.level >= 0)
    throw ConfigError("--level is for a variable-rate model; '" + o.model + "' has one rate");
  const Device device = choose_device(o.device);
  const Precision precision = choose_precision(o.precision, device);
  if (!o.out.empty() && fs::exists(o.out, error) && fs::equivalent(o.out, o.data, error))
    throw ConfigError("--out '" + o.out + "' is the --data folder; the reconstructions would overwrite the originals");
  prepare_eval_output(o);
  // No cache: each image is decoded once anyway.
  data::ImageFolder images(o.data, /*cache_bytes=*/0, o.max_image_pixels, kPixelLimitHint);
  if (!o.out.empty()) create_output_folder(o.out);

  Evaluator evaluator(o, spec, registry, stride, device, precision);
  spdlog::info("evaluating '{}' ({}, step {}, stride {}{}) on {} image(s) of '{}' on {}", o.model,
               spec.name.empty() ? spec.source : spec.name, evaluator.step, stride,
               levels > 0 ? fmt::format(", rate level {}", o.level) : std::string(), images.size(), o.data,
               device.str());
  ResultTable table(images, evaluator.codec != nullptr);
  EvalResults results = evaluate_images(evaluator, images, o.out, [&](const ImageResult& r) { table.print_row(r); });
  compute_means(results, evaluator.codec != nullptr, o.data);
  table.print_means(results);
  if (!o.out.empty()) write_report(o, evaluator.step, results);
  warn_skipped_images(images);
  return train::kExitOk;
}

}  // namespace plexus::ae

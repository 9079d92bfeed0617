#include "eval_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "plexus/codec/autoencoder_contract.h"
#include "codec_evaluation.h"
#include "image_evaluation.h"
#include "output_folder.h"
#include "plexus/atomic_file.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/data/image_folder.h"
#include "plexus/error.h"
#include "plexus/net.h"
#include "run_metadata.h"
#include "session.h"
#include "train_command.h"
#include "precision_option.h"

namespace plexus::ae {

namespace fs = std::filesystem;

int run_eval(const EvalOptions& o) {
  if (o.model.empty()) throw ConfigError("--model is required: a .safetensors file written by plexus-ae train");
  if (o.data.empty()) throw ConfigError("--data is required: a folder of images to evaluate");
  Registry registry = make_registry(o.plugins);
  std::error_code error;
  if (!fs::exists(o.model, error)) throw IoError("model file '" + o.model + "' does not exist");
  const ModelSpec spec = spec_from_checkpoint(load_safetensors(o.model), o.model, registry);
  check_contract(spec);
  const int stride = derive_stride(spec, registry);
  const Device device = choose_device(o.device);
  const Precision precision = choose_precision(o.precision, device);
  // No cache: each image is decoded once anyway.
  if (!o.out.empty() && fs::exists(o.out, error) && fs::equivalent(o.out, o.data, error))
    throw ConfigError("--out '" + o.out + "' is the --data folder; the reconstructions would overwrite the originals");
  prepare_eval_output(o);
  data::ImageFolder images(o.data, /*cache_bytes=*/0, o.max_image_pixels, kPixelLimitHint);
  if (!o.out.empty()) {
    fs::create_directories(o.out, error);
    if (error) throw IoError("cannot create the output folder '" + o.out + "': " + error.message());
  }

  Net net(spec, registry, {{kImage, Shape{1, 3, stride, stride}}}, DType::f32, device);
  const std::int64_t step = load_checkpoint(o.model, net, nullptr);
  Context ctx(device, 0);
  ctx.set_training(false);
  ctx.set_precision(precision);
  // The real codec next to the estimate: each image compressed and decoded,
  // with the same precision policy.
  std::unique_ptr<CodecModel> codec = codec_for_eval(o.model, registry, device);
  if (codec) codec->set_precision(precision);
  spdlog::info("evaluating '{}' ({}, step {}, stride {}) on {} image(s) of '{}' on {}", o.model,
               spec.name.empty() ? spec.source : spec.name, step, stride, images.size(), o.data, device.str());

  std::size_t name_width = 5;
  for (std::size_t i = 0; i < images.size(); ++i) name_width = std::max(name_width, images.relative_path(i).size());
  std::printf("%-*s  %9s  %9s  %7s", static_cast<int>(name_width), "image", "size", "PSNR dB", "bpp");
  if (codec) std::printf("  %8s  %8s  %7s  %7s", "file bpp", "file dB", "enc ms", "dec ms");
  std::printf("\n");
  nlohmann::json rows = nlohmann::json::array();
  std::set<std::string> written;
  double psnr_sum = 0, bpp_sum = 0;
  CodecEvaluation codec_sum;
  int count = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    auto image = images.load(i);
    if (!image) continue;
    const std::string name = images.relative_path(i);
    ImageEvaluation e = evaluate_image(net, ctx, *image, stride);
    const std::string size = std::to_string(image->width) + "x" + std::to_string(image->height);
    std::printf("%-*s  %9s  %9.3f  %7.4f", static_cast<int>(name_width), name.c_str(), size.c_str(), e.psnr, e.bpp);
    CodecEvaluation file;
    if (codec) {
      file = evaluate_codec(*codec, *image);
      std::printf("  %8.4f  %8.3f  %7.1f  %7.1f", file.bpp, file.psnr, file.encode_ms, file.decode_ms);
      codec_sum.bpp += file.bpp;
      codec_sum.psnr += file.psnr;
      codec_sum.encode_ms += file.encode_ms;
      codec_sum.decode_ms += file.decode_ms;
    }
    std::printf("\n");
    std::fflush(stdout);
    psnr_sum += e.psnr;
    bpp_sum += e.bpp;
    ++count;
    nlohmann::json row{{"image", name}, {"width", image->width}, {"height", image->height}, {"psnr", e.psnr},
                       {"bpp", e.bpp}};
    if (codec)
      row["file"] = {{"bytes", file.bytes}, {"bpp", file.bpp}, {"psnr", file.psnr}, {"encode_ms", file.encode_ms},
                     {"decode_ms", file.decode_ms}};
    if (!o.out.empty()) {
      // <relative path>.png, or <relative path with its extension>.png when
      // another input already took that name (a.jpg next to a.png).
      fs::path target = fs::path(o.out) / fs::path(name).replace_extension(".png");
      if (!written.insert(target.string()).second) target = fs::path(o.out) / (name + ".png");
      written.insert(target.string());
      fs::create_directories(target.parent_path(), error);
      data::write_png(target.string(), e.reconstruction);
      row["reconstruction"] = target.string();
    }
    rows.push_back(row);
  }
  if (count == 0) throw IoError("no image in '" + o.data + "' could be decoded (see the warnings above)");
  const double mean_psnr = psnr_sum / count, mean_bpp = bpp_sum / count;
  std::printf("%-*s  %9s  %9.3f  %7.4f", static_cast<int>(name_width), "mean", ("n=" + std::to_string(count)).c_str(),
              mean_psnr, mean_bpp);
  if (codec)
    std::printf("  %8.4f  %8.3f  %7.1f  %7.1f", codec_sum.bpp / count, codec_sum.psnr / count,
                codec_sum.encode_ms / count, codec_sum.decode_ms / count);
  std::printf("\n");
  std::fflush(stdout);
  if (!o.out.empty()) {
    const std::string json_path = (fs::path(o.out) / "eval.json").string();
    // File names need not be UTF-8: replace what JSON cannot hold rather than fail.
    nlohmann::json results{{"model", o.model},   {"step", step},           {"data", o.data},
                           {"images", rows},     {"mean_psnr", mean_psnr}, {"mean_bpp", mean_bpp}};
    if (codec)
      results["mean_file"] = {{"bpp", codec_sum.bpp / count},             {"psnr", codec_sum.psnr / count},
                              {"encode_ms", codec_sum.encode_ms / count}, {"decode_ms", codec_sum.decode_ms / count}};
    write_file_atomically(json_path, results.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + '\n',
                          "the evaluation results");
    spdlog::info("reconstructions and eval.json written to '{}'", o.out);
  }
  const auto skipped = images.skipped();
  if (!skipped.empty()) {
    std::string list;
    for (const auto& path : skipped) list += "\n  " + path;
    spdlog::warn("{} image(s) in '{}' were skipped as unreadable:{}", skipped.size(), o.data, list);
  }
  return kExitOk;
}

}  // namespace plexus::ae

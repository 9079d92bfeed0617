#pragma once
// `plexus-ae eval`, and what it reports about the real codec next to the
// entropy model's estimate (codec_evaluation.cpp).
#include <cstddef>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "options.h"
#include "plexus/codec/codec_model.h"

namespace plexus::ae {

// Declares the `eval` subcommand and its options on `app`; once parsed, it
// runs and leaves its exit code in `exit_code`.
void add_eval_command(CLI::App& app, int& exit_code);

// `plexus-ae eval`: every image of --data at full size through the model in
// eval mode; prints a table (name, size, PSNR, bpp) and the means to stdout;
// with --out, writes reconstructions as PNG and eval.json.
int run_eval(const EvalOptions& options);

// What `plexus-ae eval` reports about the real codec next to the entropy
// model's estimate: one image compressed to a file in memory and decoded.
struct CodecEvaluation {
  std::size_t bytes = 0;                // the whole file, header and checksum included
  double bpp = 0;                       // 8 * bytes / original pixels
  double psnr = 0;                      // dB, of the decoded image against the original
  double ms_ssim = 0;                   // of the decoded image against the original; NaN for a small image
  double encode_ms = 0, decode_ms = 0;  // wall time of compress and decompress
};

// The codec for `model_path`, or null (with a warning saying why) when the
// model cannot be used as one.
std::unique_ptr<codec::CodecModel> codec_for_eval(const std::string& model_path, const Registry& registry,
                                                  Device device);

// `decoded_latent`, when given, receives the latent the file decodes to
// (codec::CodecModel::Latents::latent), decoded once more outside the timings.
CodecEvaluation evaluate_codec(codec::CodecModel& codec, const data::Image& image, Tensor* decoded_latent = nullptr);

}  // namespace plexus::ae

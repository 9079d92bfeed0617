#pragma once
// What `plexus-ae eval` reports about the real codec next to the entropy
// model's estimate: one image compressed to a file in memory and decoded.
#include <cstddef>
#include <memory>
#include <string>

#include "plexus/codec/codec_model.h"

namespace plexus::ae {

struct CodecEvaluation {
  std::size_t bytes = 0;                // the whole file, header and checksum included
  double bpp = 0;                       // 8 * bytes / original pixels
  double psnr = 0;                      // dB, of the decoded image against the original
  double ms_ssim = 0;                   // of the decoded image against the original; NaN for a small image
  double encode_ms = 0, decode_ms = 0;  // wall time of compress and decompress
};

// The codec for `model_path`, or null (with a warning saying why) when the
// model cannot be used as one.
std::unique_ptr<CodecModel> codec_for_eval(const std::string& model_path, const Registry& registry, Device device);

CodecEvaluation evaluate_codec(CodecModel& codec, const data::Image& image);

}  // namespace plexus::ae

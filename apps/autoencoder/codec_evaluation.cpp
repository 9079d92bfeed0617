#include "eval_command.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "image_evaluation.h"
#include "plexus/error.h"

namespace plexus::ae {

std::unique_ptr<codec::CodecModel> codec_for_eval(const std::string& model_path, const Registry& registry,
                                                  Device device) {
  try {
    return codec::CodecModel::from_file(model_path, registry, device);
  } catch (const Error& e) {
    spdlog::warn("reporting the estimated rate only, without compressing: {}", e.what());
    return nullptr;
  }
}

CodecEvaluation evaluate_codec(codec::CodecModel& codec, const data::Image& image, Tensor* decoded_latent) {
  using Clock = std::chrono::steady_clock;
  CodecEvaluation result;
  // compress ends by copying the latent to the host and decompress by
  // copying the image back, so both times include all device work.
  const auto start = Clock::now();
  const std::vector<std::uint8_t> bytes = codec.compress(image);
  const auto encoded = Clock::now();
  const data::Image decoded = codec.decompress(bytes.data(), bytes.size());
  const auto decoded_at = Clock::now();
  result.bytes = bytes.size();
  result.bpp = 8.0 * static_cast<double>(bytes.size()) / (static_cast<double>(image.width) * image.height);
  result.psnr = data::psnr(image, decoded);
  result.ms_ssim = ms_ssim_of_images(decoded, image);
  result.encode_ms = std::chrono::duration<double, std::milli>(encoded - start).count();
  result.decode_ms = std::chrono::duration<double, std::milli>(decoded_at - encoded).count();
  if (decoded_latent) *decoded_latent = codec.decode_latents(bytes.data(), bytes.size()).latent;
  return result;
}

}  // namespace plexus::ae

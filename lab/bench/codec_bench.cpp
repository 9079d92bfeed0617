// plexus-codec-bench: wall time of plexus-ae's compress and decompress (in
// memory, no file or PNG I/O) per image, after warm-up, on one device.
//   plexus-codec-bench --model M --device cuda --repeats 20 a.png b.png ...
// For each image: the file size and bpp, then the median, min and max of
// `repeats` encodes and decodes after `warmup` untimed ones. compress ends by
// copying the latent to the host and decompress by copying the image back,
// so each time covers all device work. Also timed apart: the analysis alone
// (encode_latent: image to the device, transform, rounded latent back to the
// host) and the entropy decoding alone (decode_latent: parse, check, rANS),
// so that entropy coding = encode - analysis and synthesis = decode -
// entropy decoding. Prints one JSON object per image.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/codec/codec_model.h"
#include "plexus/context.h"

namespace {

struct Stats {
  double median, min, max;
};

Stats stats_of(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, device_text = "auto";
  std::vector<std::string> images;
  int repeats = 20, warmup = 3;
  CLI::App app{"plexus-codec-bench: compress/decompress wall time per image"};
  app.add_option("--model", model_path, "model.safetensors")->required();
  app.add_option("--device", device_text, "cpu, cuda, cuda:N or auto");
  app.add_option("--repeats", repeats, "timed runs per image")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs per image first")->check(CLI::NonNegativeNumber);
  app.add_option("images", images, "PNG or JPEG images")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const plexus::Device device = plexus::parse_device(device_text);
    const plexus::Registry registry = plexus::builtin_registry();
    auto model = plexus::codec::CodecModel::from_file(model_path, registry, device);
    using Clock = std::chrono::steady_clock;
    for (const std::string& path : images) {
      const plexus::data::Image image = plexus::data::read_image(path);
      std::vector<std::uint8_t> bytes;
      for (int i = 0; i < warmup; ++i) {
        bytes = model->compress(image);
        model->decompress(bytes.data(), bytes.size());
      }
      std::vector<double> encode, decode, analysis, entropy_decode;
      auto ms = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      };
      for (int i = 0; i < repeats; ++i) {
        const auto t0 = Clock::now();
        bytes = model->compress(image);
        const auto t1 = Clock::now();
        const plexus::data::Image decoded = model->decompress(bytes.data(), bytes.size());
        const auto t2 = Clock::now();
        const plexus::Tensor latent = model->encode_latent(image);
        const auto t3 = Clock::now();
        const plexus::Tensor decoded_latent = model->decode_latent(bytes.data(), bytes.size());
        const auto t4 = Clock::now();
        encode.push_back(ms(t0, t1));
        decode.push_back(ms(t1, t2));
        analysis.push_back(ms(t2, t3));
        entropy_decode.push_back(ms(t3, t4));
      }
      const Stats e = stats_of(encode), d = stats_of(decode), a = stats_of(analysis), r = stats_of(entropy_decode);
      std::printf(
          "{\"image\": \"%s\", \"device\": \"%s\", \"width\": %d, \"height\": %d, \"bytes\": %zu, \"bpp\": %.4f, "
          "\"encode_ms\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
          "\"decode_ms\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
          "\"analysis_ms\": {\"median\": %.2f}, \"entropy_decode_ms\": {\"median\": %.2f}, \"repeats\": %d}\n",
          path.c_str(), device.str().c_str(), image.width, image.height, bytes.size(),
          8.0 * bytes.size() / (static_cast<double>(image.width) * image.height), e.median, e.min, e.max, d.median,
          d.min, d.max, a.median, r.median, repeats);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

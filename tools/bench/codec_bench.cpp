// plexus-codec-bench: wall time of plexus-ae's compress and decompress (in
// memory, no file or PNG I/O) per image, after warm-up, on one device.
//   plexus-codec-bench --model M --device cuda --repeats 20 a.png b.png ...
// For each image: the file size and bpp, then the median, min and max of
// `repeats` encodes and decodes after `warmup` untimed ones. compress ends by
// copying the latent to the host and decompress by copying the image back,
// so each time covers all device work. Prints one JSON object per image.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "codec_model.h"
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
    auto model = plexus::ae::CodecModel::from_file(model_path, registry, device);
    using Clock = std::chrono::steady_clock;
    for (const std::string& path : images) {
      const plexus::data::Image image = plexus::data::read_image(path);
      std::vector<std::uint8_t> bytes;
      for (int i = 0; i < warmup; ++i) model->decompress((bytes = model->compress(image)).data(), bytes.size());
      std::vector<double> encode, decode;
      for (int i = 0; i < repeats; ++i) {
        const auto start = Clock::now();
        bytes = model->compress(image);
        const auto middle = Clock::now();
        const plexus::data::Image decoded = model->decompress(bytes.data(), bytes.size());
        const auto end = Clock::now();
        encode.push_back(std::chrono::duration<double, std::milli>(middle - start).count());
        decode.push_back(std::chrono::duration<double, std::milli>(end - middle).count());
      }
      const Stats e = stats_of(encode), d = stats_of(decode);
      std::printf(
          "{\"image\": \"%s\", \"device\": \"%s\", \"width\": %d, \"height\": %d, \"bytes\": %zu, \"bpp\": %.4f, "
          "\"encode_ms\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
          "\"decode_ms\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, \"repeats\": %d}\n",
          path.c_str(), device.str().c_str(), image.width, image.height, bytes.size(),
          8.0 * bytes.size() / (static_cast<double>(image.width) * image.height), e.median, e.min, e.max, d.median,
          d.min, d.max, repeats);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

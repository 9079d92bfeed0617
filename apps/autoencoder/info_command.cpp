#include "info_command.h"

#include <cstdio>

#include <spdlog/spdlog.h>

#include "compress_command.h"
#include "plexus/train/exit_codes.h"
#include "plexus/codec/bitstream.h"
#include "plexus/error.h"

namespace plexus::ae {

std::string describe_compressed_file(const std::vector<std::uint8_t>& bytes) {
  const Bitstream file = read_bitstream(bytes.data(), bytes.size());
  const BitstreamHeader& header = file.header;
  const double pixels = static_cast<double>(header.width) * header.height;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%ux%u %s, %zu bytes, %.4f bpp", header.width, header.height,
                header.grey ? "grey" : "RGB", bytes.size(), pixels > 0 ? 8.0 * bytes.size() / pixels : 0.0);
  // Version 5 names its codec section by fingerprint, not a kind: the tree needs the model to be read.
  const std::string format = header.version >= kSectionedVersion
                                 ? std::to_string(file.streams.size()) + " coded stream" +
                                       (file.streams.size() == 1 ? "" : "s") + ", codec section " +
                                       fingerprint_text(header.codec_fingerprint)
                                 : std::string(model_kind_name(header.kind));
  std::string text = std::string(numbers) + "; format version " + std::to_string(header.version) + " (" + format +
                     "), model fingerprint " + fingerprint_text(header.fingerprint);
  if (header.variable_rate) {
    char level[32];
    std::snprintf(level, sizeof level, "%g", header.rate_level / static_cast<double>(kRateLevelOne));
    text += std::string(", rate level ") + level;
  }
  if (!header.icc_profile.empty()) text += ", ICC profile of " + std::to_string(header.icc_profile.size()) + " bytes";
  return text;
}

void add_info_command(CLI::App& app, int& exit_code) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* command = app.add_subcommand(
      "info", "what .pxae files hold, read without their model: size, bits per pixel, format, model fingerprint");
  command->add_option("files", *files, ".pxae files written by plexus-ae compress")->required()->type_name("FILE");
  command->footer(
      "Example:\n"
      "  plexus-ae info photo.pxae\n"
      "  photo.pxae: 768x512 RGB, 23456 bytes, 0.4772 bpp; format version 5 (2 coded streams, codec section "
      "0123456789abcdef), model fingerprint 0123456789abcdef, rate level 2\n"
      "The file format is described in docs/bitstream.md.");
  command->callback([files, &exit_code] {
    int failures = 0;
    for (const std::string& file : *files) {
      try {
        const std::string line = describe_compressed_file(read_compressed_file(file, kMaxInfoFileBytes));
        std::printf("%s: %s\n", file.c_str(), line.c_str());
      } catch (const Error& e) {
        spdlog::error("cannot read '{}': {}", file, e.what());
        ++failures;
      }
    }
    std::fflush(stdout);
    exit_code = failures == 0 ? train::kExitOk : train::kExitError;
  });
}

}  // namespace plexus::ae

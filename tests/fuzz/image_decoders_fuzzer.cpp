// libFuzzer harness: the PNG (libpng) and JPEG (libjpeg) decoders, from
// memory (decode_image) and from a file (read_image_size, then
// try_read_image, as ImageFolder does), with a pixel limit of 256x256 so
// that a header claiming a huge image is refused before any decoding.
// Failing with a reason is a correct answer; a crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "memory_file.h"
#include "plexus/data/image.h"

namespace {
constexpr std::int64_t kMaxPixels = 256 * 256;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static plexus::fuzzing::MemoryFile file;
  plexus::data::Image image;
  std::string reason;
  const bool decoded = plexus::data::decode_image(data, size, kMaxPixels, image, reason);
  if (decoded && image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3) __builtin_trap();

  file.assign(data, size);
  plexus::data::ImageSize header;
  if (plexus::data::read_image_size(file.path(), header, reason, kMaxPixels)) {
    plexus::data::Image from_file;
    if (plexus::data::try_read_image(file.path(), from_file, reason, kMaxPixels) &&
        (from_file.width != header.width || from_file.height != header.height))
      __builtin_trap();  // the header and the decoded image disagree
  }
  return 0;
}

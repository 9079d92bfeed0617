// read_image / read_image_size: open the file, tell PNG from JPEG by its
// first bytes (not its extension), and hand it to the decoder; read_image
// warns about what the decoder converted.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "image_codecs.h"
#include "plexus/data/image.h"
#include "plexus/error.h"

namespace plexus::data {

std::string pixel_limit_problem(std::int64_t width, std::int64_t height, std::int64_t max_pixels) {
  if (width < 1 || height < 1) return "empty image (" + std::to_string(width) + "x" + std::to_string(height) + ")";
  // Both sides are below 2^32 (the formats' fields), so the product fits.
  const std::int64_t pixels = width * height;
  if (pixels > max_pixels)
    return "the image is " + std::to_string(width) + "x" + std::to_string(height) + " = " + std::to_string(pixels) +
           " pixels, more than the limit of " + std::to_string(max_pixels) + " pixels";
  return "";
}

std::string ImageConversions::description() const {
  std::string text;
  auto add = [&](bool happened, const char* what) {
    if (!happened) return;
    if (!text.empty()) text += "; ";
    text += what;
  };
  add(reduced_from_16_bits, "16-bit samples reduced to 8 bits (the high byte kept)");
  add(grey_expanded, "greyscale copied to R, G and B");
  add(alpha_dropped, "alpha channel (transparency) dropped, transparent pixels keep their stored colour");
  add(cmyk_converted, "CMYK converted to RGB");
  return text;
}

void warn_about_conversions(const std::string& path, const ImageConversions& conversions) {
  if (conversions.any()) spdlog::warn("converting image '{}' to 8-bit RGB: {}", path, conversions.description());
}

namespace {

enum class Format { png, jpeg, unknown };

Format sniff(const unsigned char* head, std::size_t size) {
  static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(head, png_signature, 8) == 0) return Format::png;
  if (size >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF) return Format::jpeg;
  return Format::unknown;
}

bool read(const codecs::Source& source, const unsigned char* head, std::size_t head_size, std::int64_t max_pixels,
          ImageSize& size, Image* image, ImageConversions* conversions, std::string& reason) {
  ImageConversions converted;
  bool decoded = false;
  switch (sniff(head, head_size)) {
    case Format::png:
      decoded = codecs::read_png(source, max_pixels, size, image, converted, reason);
      break;
    case Format::jpeg:
      decoded = codecs::read_jpeg(source, max_pixels, size, image, converted, reason);
      break;
    case Format::unknown:
      reason = head_size == 0 ? "the file is empty" : "not a PNG or JPEG file (unknown signature)";
      return false;
  }
  if (decoded && conversions) *conversions = converted;
  return decoded;
}

bool read_file(const std::string& path, std::int64_t max_pixels, ImageSize& size, Image* image,
               ImageConversions* conversions, std::string& reason) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    reason = std::strerror(errno);
    return false;
  }
  unsigned char head[8];
  const std::size_t head_size = std::fread(head, 1, sizeof head, file.get());
  if (std::ferror(file.get())) {
    reason = std::string("reading failed: ") + std::strerror(errno);
    return false;
  }
  std::rewind(file.get());
  return read({file.get(), nullptr, 0}, head, head_size, max_pixels, size, image, conversions, reason);
}

}  // namespace

bool decode_image(const unsigned char* bytes, std::size_t size, std::int64_t max_pixels, Image& image,
                  std::string& reason, ImageConversions* conversions) {
  ImageSize dimensions;
  return read({nullptr, bytes, size}, bytes, size, max_pixels, dimensions, &image, conversions, reason);
}

bool try_read_image(const std::string& path, Image& image, std::string& reason, std::int64_t max_pixels,
                    ImageConversions* conversions) {
  ImageSize size;
  return read_file(path, max_pixels, size, &image, conversions, reason);
}

Image read_image(const std::string& path, std::int64_t max_pixels) {
  Image image;
  std::string reason;
  ImageConversions conversions;
  if (!try_read_image(path, image, reason, max_pixels, &conversions))
    throw IoError("cannot read image '" + path + "': " + reason);
  warn_about_conversions(path, conversions);
  return image;
}

bool read_image_size(const std::string& path, ImageSize& size, std::string& reason, std::int64_t max_pixels) {
  return read_file(path, max_pixels, size, nullptr, nullptr, reason);
}

}  // namespace plexus::data

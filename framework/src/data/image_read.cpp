// PNG/JPEG decoding through stb_image (its one implementation unit).
#include <cerrno>
#include <cstring>
#include <memory>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_FAILURE_USERMSG
#include <stb_image.h>

#include "plexus/data/image.h"
#include "plexus/error.h"

namespace plexus::data {

namespace {
// stb_image keeps its failure reason in a thread-local, so this is safe
// from the loader's worker threads.
std::string decoder_reason(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return std::strerror(errno);
  std::fclose(file);
  const char* reason = stbi_failure_reason();
  return reason ? reason : "unknown decoder error";
}
}  // namespace

bool try_read_image(const std::string& path, Image& image, std::string& reason) {
  int width = 0, height = 0, channels_in_file = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(
      stbi_load(path.c_str(), &width, &height, &channels_in_file, 3), &stbi_image_free);
  if (!data) {
    reason = decoder_reason(path);
    return false;
  }
  image = Image(width, height);
  std::memcpy(image.pixels.data(), data.get(), image.pixels.size());
  return true;
}

Image read_image(const std::string& path) {
  Image image;
  std::string reason;
  if (!try_read_image(path, image, reason)) throw IoError("cannot read image '" + path + "': " + reason);
  return image;
}

bool read_image_size(const std::string& path, ImageSize& size, std::string& reason) {
  int channels = 0;
  if (!stbi_info(path.c_str(), &size.width, &size.height, &channels)) {
    reason = decoder_reason(path);
    return false;
  }
  if (size.width < 1 || size.height < 1) {
    reason = "empty image (" + std::to_string(size.width) + "x" + std::to_string(size.height) + ")";
    return false;
  }
  return true;
}

}  // namespace plexus::data

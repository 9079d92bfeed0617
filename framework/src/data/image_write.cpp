// PNG encoding through stb_image_write (its one implementation unit).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

#include "plexus/data/image.h"
#include "plexus/error.h"

namespace plexus::data {

void write_png(const std::string& path, const Image& image) {
  if (image.width < 1 || image.height < 1)
    throw IoError("cannot write '" + path + "': the image is empty");
  if (!stbi_write_png(path.c_str(), image.width, image.height, 3, image.pixels.data(), image.width * 3))
    throw IoError("cannot write PNG '" + path + "' (is its folder missing or read-only?)");
}

}  // namespace plexus::data

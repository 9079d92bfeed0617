#pragma once
// The PNG (libpng) and JPEG (libjpeg) decoders behind read_image and
// read_image_size. Each reads the header, checks the size against the
// pixel limit, and only then (unless only the size was asked for) decodes.
// None throws: they return false with the reason, so a corrupt file costs a
// warning, never the run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "plexus/data/image.h"

namespace plexus::data::codecs {

// Encoded bytes, from an open file or from memory (a fuzzer's input).
struct Source {
  std::FILE* file = nullptr;
  const unsigned char* bytes = nullptr;
  std::size_t size = 0;
};

// `image` null: read the header only. On success `size` holds the image's
// width and height and, when `image` is given, `image` its RGB pixels and
// `conversions` what was converted to get them.
bool read_png(const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
              ImageConversions& conversions, std::string& reason);
bool read_jpeg(const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
               ImageConversions& conversions, std::string& reason);

}  // namespace plexus::data::codecs

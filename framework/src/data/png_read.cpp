// PNG decoding through libpng: any bit depth and colour type, reduced to
// 8-bit RGB (16-bit samples keep their high byte; alpha is dropped; palette
// and grey are expanded), reporting which of these happened.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "image_codecs.h"
#include "png_errors.h"

namespace plexus::data::codecs {

namespace {

using png_errors::ErrorState;
using png_errors::on_error;
using png_errors::on_warning;

struct MemoryReader {
  const unsigned char* bytes;
  std::size_t size;
  std::size_t offset;
};

void read_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* reader = static_cast<MemoryReader*>(png_get_io_ptr(png));
  if (length > reader->size - reader->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, reader->bytes + reader->offset, length);
  reader->offset += length;
}

// Everything with a destructor lives here, outside the function that calls
// setjmp, so a longjmp out of libpng skips no C++ destructor.
struct Decoding {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ErrorState error;
  MemoryReader memory{nullptr, 0, 0};
  std::vector<unsigned char> row;
  std::string limit_problem;
  ~Decoding() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Returns true on success; false with d.error.message or d.limit_problem set.
bool decode(Decoding& d, const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
            ImageConversions& conversions) {
  if (setjmp(png_jmpbuf(d.png))) return false;
  if (source.file) {
    png_init_io(d.png, source.file);
  } else {
    d.memory = {source.bytes, source.size, 0};
    png_set_read_fn(d.png, &d.memory, &read_memory);
  }
  png_read_info(d.png, d.info);
  const png_uint_32 width = png_get_image_width(d.png, d.info), height = png_get_image_height(d.png, d.info);
  d.limit_problem = pixel_limit_problem(width, height, max_pixels);
  if (!d.limit_problem.empty()) return false;
  size.width = static_cast<int>(width);
  size.height = static_cast<int>(height);
  if (!image) return true;

  conversions.reduced_from_16_bits = png_get_bit_depth(d.png, d.info) == 16;
  conversions.grey_expanded = (png_get_color_type(d.png, d.info) & PNG_COLOR_MASK_COLOR) == 0;
  png_set_strip_16(d.png);
  png_set_packing(d.png);
  png_set_palette_to_rgb(d.png);
  png_set_expand_gray_1_2_4_to_8(d.png);
  png_set_gray_to_rgb(d.png);
  const int passes = png_set_interlace_handling(d.png);
  png_read_update_info(d.png, d.info);
  const int channels = png_get_channels(d.png, d.info);  // 3 (RGB) or 4 (RGB + alpha)
  if ((channels != 3 && channels != 4) || png_get_bit_depth(d.png, d.info) != 8)
    png_error(d.png, "unexpected pixel layout after conversion to 8-bit RGB");
  conversions.alpha_dropped = channels == 4;  // an alpha channel, or transparency (tRNS) expanded to one
  *image = Image(size.width, size.height);
  // libpng has checked the profile's header against the image (an RGB or a grey profile).
  png_charp profile_name = nullptr;
  png_bytep profile = nullptr;
  png_uint_32 profile_size = 0;
  int compression = 0;
  if (png_get_iCCP(d.png, d.info, &profile_name, &compression, &profile, &profile_size) == PNG_INFO_iCCP)
    image->icc_profile.assign(profile, profile + profile_size);
  d.row.resize(static_cast<std::size_t>(width) * channels);
  // Interlaced images are read once per pass; each pass updates the row in place.
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < height; ++y) {
      unsigned char* out = &image->pixels[static_cast<std::size_t>(y) * width * 3];
      if (channels == 4) {
        for (png_uint_32 x = 0; x < width; ++x) std::memcpy(&d.row[x * 4], out + x * 3, 3);
      }
      png_read_row(d.png, channels == 3 ? out : d.row.data(), nullptr);
      if (channels == 4)
        for (png_uint_32 x = 0; x < width; ++x) std::memcpy(out + x * 3, &d.row[x * 4], 3);
    }
  }
  png_read_end(d.png, nullptr);
  return true;
}

}  // namespace

bool read_png(const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
              ImageConversions& conversions, std::string& reason) {
  Decoding d;
  d.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d.error, &on_error, &on_warning);
  if (d.png) d.info = png_create_info_struct(d.png);
  if (!d.png || !d.info) {
    reason = "out of memory starting the PNG decoder";
    return false;
  }
  if (decode(d, source, max_pixels, size, image, conversions)) return true;
  reason = !d.limit_problem.empty() ? d.limit_problem : std::string("corrupt PNG: ") + d.error.message;
  if (image) *image = Image();
  return false;
}

}  // namespace plexus::data::codecs

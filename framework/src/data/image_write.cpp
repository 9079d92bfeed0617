// PNG encoding through libpng, into an AtomicFile: a full disk or a
// read-only folder is an IoError with the reason, never a truncated PNG.
#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "plexus/atomic_file.h"
#include "plexus/data/image.h"
#include "plexus/error.h"
#include "png_errors.h"

namespace plexus::data {

namespace {

using png_errors::ErrorState;
using png_errors::on_error;
using png_errors::on_warning;

void write_to_file(png_structp png, png_bytep bytes, png_size_t size) {
  if (!static_cast<AtomicFile*>(png_get_io_ptr(png))->try_write(bytes, size)) png_error(png, "write failed");
}

void flush_nothing(png_structp) {}  // AtomicFile::commit() flushes

// Everything with a destructor lives outside encode(), which calls setjmp.
struct Encoding {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ErrorState error;
  ~Encoding() { png_destroy_write_struct(&png, info ? &info : nullptr); }
};

// The grey row of RGB pixels: round((R + G + B) / 3) each.
void grey_row(const std::uint8_t* rgb, int width, std::vector<std::uint8_t>& row) {
  for (int x = 0; x < width; ++x)
    row[static_cast<std::size_t>(x)] =
        static_cast<std::uint8_t>((rgb[3 * x] + rgb[3 * x + 1] + rgb[3 * x + 2] + 1) / 3);
}

// Whether `profile` is an ICC profile of the PNG's colour space, bytes 16-19
// of its header: "RGB " for an RGB PNG, "GRAY" for a grey one (libpng refuses
// any other; a profile of another space is not written).
bool profile_fits(const std::vector<std::uint8_t>& profile, bool grey) {
  if (profile.size() < 132 || profile.size() > 0xFFFFFFFFu) return false;
  return std::memcmp(&profile[16], grey ? "GRAY" : "RGB ", 4) == 0;
}

bool encode(Encoding& e, AtomicFile& file, const Image& image, PngColour colour, std::vector<std::uint8_t>& row) {
  if (setjmp(png_jmpbuf(e.png))) return false;
  const bool grey = colour == PngColour::grey;
  png_set_write_fn(e.png, &file, &write_to_file, &flush_nothing);
  png_set_IHDR(e.png, e.info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               grey ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (profile_fits(image.icc_profile, grey))
    png_set_iCCP(e.png, e.info, "ICC profile", PNG_COMPRESSION_TYPE_BASE, image.icc_profile.data(),
                 static_cast<png_uint_32>(image.icc_profile.size()));
  png_write_info(e.png, e.info);
  for (int y = 0; y < image.height; ++y) {
    const std::uint8_t* rgb = &image.pixels[static_cast<std::size_t>(y) * image.width * 3];
    if (grey) grey_row(rgb, image.width, row);
    png_write_row(e.png, grey ? row.data() : rgb);
  }
  png_write_end(e.png, nullptr);
  return true;
}

}  // namespace

void write_png(const std::string& path, const Image& image, PngColour colour) {
  if (image.width < 1 || image.height < 1) throw IoError("cannot write PNG '" + path + "': the image is empty");
  AtomicFile file(path, "PNG");
  Encoding e;
  e.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &e.error, &on_error, &on_warning);
  if (e.png) e.info = png_create_info_struct(e.png);
  if (!e.png || !e.info) throw IoError("cannot write PNG '" + path + "': out of memory starting the PNG encoder");
  std::vector<std::uint8_t> row(static_cast<std::size_t>(image.width));  // outside encode(): it calls setjmp
  if (!encode(e, file, image, colour, row)) {
    file.check_writes();  // the system's reason (a full disk), when that was the cause
    throw IoError("cannot write PNG '" + path + "': " + e.error.message);
  }
  file.commit();
}

}  // namespace plexus::data

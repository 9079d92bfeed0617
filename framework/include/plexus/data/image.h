#pragma once
// Image: an 8-bit RGB picture in memory, and the conversions the training
// and evaluation code need (file <-> Image <-> NCHW float tensor in [0, 1]).
// The file readers and writers (read_image ... write_png, through libjpeg and
// libpng) are in libplexus_data; the type and the in-memory functions in
// libplexus, so that the codec needs no image file code.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/tensor.h"

namespace plexus::data {

// Row-major, 3 bytes per pixel (R, G, B); pixels.size() == height * width * 3.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;
  // The ICC colour profile the file embeds (a PNG's iCCP chunk, a JPEG's
  // APP2 ICC_PROFILE segments), uncompressed; empty when it has none, and
  // the pixels are then taken to be sRGB. write_png writes it back.
  std::vector<std::uint8_t> icc_profile;

  Image() = default;
  Image(int width, int height);  // black
  std::uint8_t& at(int y, int x, int channel) {
    return pixels[(static_cast<std::size_t>(y) * width + x) * 3 + channel];
  }
  std::uint8_t at(int y, int x, int channel) const {
    return pixels[(static_cast<std::size_t>(y) * width + x) * 3 + channel];
  }
  std::size_t bytes() const { return pixels.size(); }
};

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The largest image, in pixels (width x height), that is decoded unless the
// caller says otherwise: a 50-megapixel photo. The header is checked first,
// so a file claiming more costs no memory.
inline constexpr std::int64_t kDefaultMaxImagePixels = 50'000'000;

// What decoding changed to make 8-bit RGB of a file (all false for an
// 8-bit RGB PNG or a colour JPEG).
struct ImageConversions {
  bool reduced_from_16_bits = false;  // 16-bit PNG samples: the high byte is kept
  bool grey_expanded = false;         // a grey image: its one channel copied to R, G and B
  bool alpha_dropped = false;         // a PNG alpha channel or transparency: dropped, colours kept as stored
  bool cmyk_converted = false;        // an (Adobe) CMYK JPEG: R = C * K / 255, and so on
  bool any() const { return reduced_from_16_bits || grey_expanded || alpha_dropped || cmyk_converted; }
  // "16-bit samples reduced to 8 bits (the high byte kept); ...", "" for none.
  std::string description() const;
};

// Decodes a PNG (libpng) or JPEG (libjpeg), told apart by their first bytes,
// to 8-bit RGB (see ImageConversions): grey is expanded to RGB, alpha is
// dropped, 16-bit PNGs are reduced to 8 bits, CMYK JPEGs are converted; a
// JPEG with corrupt data is refused, not patched with grey. A JPEG's EXIF
// orientation (1-8) is applied, so a phone photo comes out upright (and
// read_image_size reports the upright size). Warns (spdlog) once per call,
// naming the file, when anything was converted. Throws IoError naming the
// file and the reason (including an image larger than `max_pixels`).
Image read_image(const std::string& path, std::int64_t max_pixels = kDefaultMaxImagePixels);
// As read_image, but returns false with the reason instead of throwing, and
// reports the conversions in `conversions` (when given) instead of warning.
bool try_read_image(const std::string& path, Image& image, std::string& reason,
                    std::int64_t max_pixels = kDefaultMaxImagePixels, ImageConversions* conversions = nullptr);
// As try_read_image, from encoded bytes in memory.
bool decode_image(const unsigned char* bytes, std::size_t size, std::int64_t max_pixels, Image& image,
                  std::string& reason, ImageConversions* conversions = nullptr);
// spdlog warning "converting image '<path>' to 8-bit RGB: <description>",
// or nothing when `conversions` holds none.
void warn_about_conversions(const std::string& path, const ImageConversions& conversions);
// Reads only the header. Returns false (and the reason) when the file is
// missing, not a readable PNG/JPEG, or larger than `max_pixels`; never throws.
bool read_image_size(const std::string& path, ImageSize& size, std::string& reason,
                     std::int64_t max_pixels = kDefaultMaxImagePixels);
// "" when a width x height image is within `max_pixels`, else a sentence
// saying it is not (or that it is empty).
std::string pixel_limit_problem(std::int64_t width, std::int64_t height, std::int64_t max_pixels);
// Writes a PNG (libpng) atomically (see plexus/atomic_file.h): RGB, or grey
// (one channel, round((R + G + B) / 3), for an image that was grey before it
// was expanded to RGB), with the image's ICC profile as an iCCP chunk. Throws IoError naming the file and the system's
// reason when it cannot be written.
enum class PngColour { rgb, grey };
void write_png(const std::string& path, const Image& image, PngColour colour = PngColour::rgb);

// [1, 3, H, W] f32 on the CPU, values v / 255.
Tensor image_to_tensor(const Image& image);
// Image `index` of an [N, 3, H, W] tensor (any dtype or device): each value
// clamped to [0, 1], times 255, rounded to the nearest integer.
Image tensor_to_image(const Tensor& batch, std::int64_t index = 0);

// `image` grown to width x height (each at least the image's own) by
// repeating its last column and last row ("replicate" padding).
Image pad_replicate(const Image& image, int width, int height);
// The top-left width x height of `image`.
Image crop_top_left(const Image& image, int width, int height);

// Peak signal-to-noise ratio in dB between two images of equal size, with
// MSE taken over every pixel and channel on the 8-bit scale:
// PSNR = 10 log10(255^2 / MSE). Infinity for identical images.
double psnr(const Image& reference, const Image& other);

}  // namespace plexus::data

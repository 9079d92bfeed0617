// JPEG decoding through libjpeg (libjpeg-turbo), using only the standard
// libjpeg API: baseline and progressive, grey, YCbCr and (Adobe) CMYK,
// converted to 8-bit RGB. Any libjpeg warning ("Corrupt JPEG data",
// "Premature end of JPEG file") fails the image: libjpeg would otherwise
// fill the damaged part with grey and train on it. The EXIF orientation
// (a phone's rotation) is applied, so the image comes out upright.
#include <cstdio>
#include <cstdlib>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "exif_orientation.h"
#include "image_codecs.h"

namespace plexus::data::codecs {

namespace {

// A progressive JPEG may hold thousands of tiny scans, each a pass over the
// whole image: a few kilobytes that take minutes to decode. Real files have
// about ten; more than this is refused.
constexpr int kMaxProgressiveScans = 256;

struct ErrorState {
  jpeg_error_mgr manager;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

[[noreturn]] void on_error(j_common_ptr info) {
  auto* state = reinterpret_cast<ErrorState*>(info->err);
  (*info->err->format_message)(info, state->message);
  std::longjmp(state->jump, 1);
}

// msg_level -1 is a warning about corrupt data: treated as an error.
// Levels >= 0 are trace messages: ignored.
void on_message(j_common_ptr info, int msg_level) {
  if (msg_level < 0) on_error(info);
}

void on_output(j_common_ptr) {}  // never print to stderr

void on_progress(j_common_ptr info) {
  auto* decompress = reinterpret_cast<j_decompress_ptr>(info);
  if (decompress->progressive_mode && decompress->input_scan_number > kMaxProgressiveScans) {
    auto* state = reinterpret_cast<ErrorState*>(info->err);
    std::snprintf(state->message, sizeof state->message, "more than %d progressive scans", kMaxProgressiveScans);
    std::longjmp(state->jump, 1);
  }
}

// Everything with a destructor lives here, outside the function that calls
// setjmp, so a longjmp out of libjpeg skips no C++ destructor.
struct Decoding {
  jpeg_decompress_struct info{};
  ErrorState error;
  jpeg_progress_mgr progress{};
  std::vector<unsigned char> row;
  std::string limit_problem;
  int orientation = 1;  // EXIF, 1-8
  bool created = false;
  ~Decoding() {
    if (created) jpeg_destroy_decompress(&info);
  }
};

// Adobe CMYK JPEGs store inverted ink amounts: R = C * K / 255, and so on.
void cmyk_to_rgb(const unsigned char* cmyk, unsigned char* rgb, unsigned width) {
  for (unsigned x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const unsigned k = cmyk[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<unsigned char>((cmyk[c] * k + 127) / 255);
  }
}

// The orientation in the first APP1 segment that is EXIF, else 1.
int orientation_of(const jpeg_decompress_struct& info) {
  for (jpeg_saved_marker_ptr marker = info.marker_list; marker; marker = marker->next)
    if (marker->marker == JPEG_APP0 + 1 && marker->data_length >= 6 && std::memcmp(marker->data, "Exif\0\0", 6) == 0)
      return exif_orientation(marker->data, marker->data_length);
  return 1;
}

bool decode(Decoding& d, const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
            ImageConversions& conversions) {
  if (setjmp(d.error.jump)) return false;
  jpeg_create_decompress(&d.info);
  d.created = true;
  d.progress.progress_monitor = &on_progress;
  d.info.progress = &d.progress;
  if (source.file) jpeg_stdio_src(&d.info, source.file);
  else jpeg_mem_src(&d.info, const_cast<unsigned char*>(source.bytes), static_cast<unsigned long>(source.size));
  jpeg_save_markers(&d.info, JPEG_APP0 + 1, 0xFFFF);
  jpeg_save_markers(&d.info, JPEG_APP0 + 2, 0xFFFF);  // ICC_PROFILE segments
  jpeg_read_header(&d.info, TRUE);
  d.limit_problem = pixel_limit_problem(d.info.image_width, d.info.image_height, max_pixels);
  if (!d.limit_problem.empty()) return false;
  d.orientation = orientation_of(d.info);
  const bool swap = orientation_swaps_sides(d.orientation);
  size.width = static_cast<int>(swap ? d.info.image_height : d.info.image_width);
  size.height = static_cast<int>(swap ? d.info.image_width : d.info.image_height);
  if (!image) return true;

  const bool cmyk = d.info.jpeg_color_space == JCS_CMYK || d.info.jpeg_color_space == JCS_YCCK;
  d.info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  conversions.cmyk_converted = cmyk;
  conversions.grey_expanded = d.info.jpeg_color_space == JCS_GRAYSCALE;
  jpeg_start_decompress(&d.info);
  const int expected = cmyk ? 4 : 3;
  if (d.info.output_components != expected || d.info.output_width != d.info.image_width ||
      d.info.output_height != d.info.image_height) {
    std::snprintf(d.error.message, sizeof d.error.message, "unexpected output layout (%d components)",
                  d.info.output_components);
    return false;
  }
  *image = Image(static_cast<int>(d.info.output_width), static_cast<int>(d.info.output_height));
  JOCTET* profile = nullptr;
  unsigned int profile_size = 0;
  if (jpeg_read_icc_profile(&d.info, &profile, &profile_size)) {
    // A CMYK profile does not describe the RGB this decodes to (the conversion is reported).
    if (!cmyk) image->icc_profile.assign(profile, profile + profile_size);
    std::free(profile);
  }
  if (cmyk) d.row.resize(static_cast<std::size_t>(d.info.output_width) * 4);
  while (d.info.output_scanline < d.info.output_height) {
    unsigned char* out = &image->pixels[static_cast<std::size_t>(d.info.output_scanline) * d.info.output_width * 3];
    JSAMPROW row = cmyk ? d.row.data() : out;
    if (jpeg_read_scanlines(&d.info, &row, 1) != 1) {
      std::snprintf(d.error.message, sizeof d.error.message, "the decoder stopped at row %u of %u",
                    d.info.output_scanline, d.info.output_height);
      return false;
    }
    if (cmyk) cmyk_to_rgb(d.row.data(), out, d.info.output_width);
  }
  jpeg_finish_decompress(&d.info);
  return true;
}

}  // namespace

bool read_jpeg(const Source& source, std::int64_t max_pixels, ImageSize& size, Image* image,
               ImageConversions& conversions, std::string& reason) {
  Decoding d;
  d.info.err = jpeg_std_error(&d.error.manager);
  d.error.manager.error_exit = &on_error;
  d.error.manager.emit_message = &on_message;
  d.error.manager.output_message = &on_output;
  if (decode(d, source, max_pixels, size, image, conversions)) {
    if (image && d.orientation != 1) *image = apply_orientation(*image, d.orientation);
    return true;
  }
  reason = !d.limit_problem.empty() ? d.limit_problem : std::string("corrupt JPEG: ") + d.error.message;
  if (image) *image = Image();
  return false;
}

}  // namespace plexus::data::codecs

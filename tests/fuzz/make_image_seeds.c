// Writes the seed corpus of the image_decoders fuzzer: small PNGs and JPEGs
// of every layout the decoders handle (PNG: grey, grey+alpha, RGB, RGBA,
// palette with transparency, 1-bit, 16-bit, interlaced; JPEG: baseline,
// progressive, grey, CMYK, restart markers, EXIF orientation in either byte
// order). Regenerate with
//   cc -O1 -o /tmp/make_image_seeds tests/fuzz/make_image_seeds.c -ljpeg -lpng
//   mkdir /tmp/seeds && /tmp/make_image_seeds /tmp/seeds
//   python3 tests/fuzz/pack_seeds.py /tmp/seeds tests/fuzz/corpus/image_decoders.zip
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

enum { W = 13, H = 9 };

static unsigned char sample(int x, int y, int c) { return (unsigned char)(x * 19 + y * 7 + c * 60); }

static void write_png(const char* folder, const char* name, int color_type, int depth, int interlace) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  FILE* file = fopen(path, "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, file);
  png_set_IHDR(png, info, W, H, depth, color_type, interlace, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_color palette[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
    png_byte alpha[2] = {0, 128};
    png_set_PLTE(png, info, palette, 4);
    png_set_tRNS(png, info, alpha, 2, NULL);
  }
  png_write_info(png, info);
  const int channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  unsigned char* row = calloc(row_bytes, 1);
  const int passes = png_set_interlace_handling(png);
  for (int pass = 0; pass < passes; ++pass)
    for (int y = 0; y < H; ++y) {
      memset(row, 0, row_bytes);
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < channels; ++c) {
          if (depth == 16) {
            row[(x * channels + c) * 2] = sample(x, y, c);
            row[(x * channels + c) * 2 + 1] = sample(y, x, c);
          } else if (depth == 8) {
            row[x * channels + c] = color_type == PNG_COLOR_TYPE_PALETTE ? (x + y) % 4 : sample(x, y, c);
          } else {  // 1-bit grey or 2-bit palette: pack
            const int per_byte = 8 / depth, value = (x + y) % (1 << depth);
            row[x / per_byte] |= (unsigned char)(value << (8 - depth * (x % per_byte + 1)));
          }
        }
      png_write_row(png, row);
    }
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(row);
  fclose(file);
}

// An APP1 "Exif" payload whose first image directory holds one entry:
// orientation (tag 0x0112, SHORT, count 1) = `orientation`.
static size_t exif_orientation_payload(unsigned char* out, int orientation, int big_endian) {
  static const unsigned char little[] = {'E',  'x',  'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                                         0x12, 0x01, 3,   0,   1, 0, 0,   0,   0,  0, 0, 0, 0, 0, 0, 0};
  static const unsigned char big[] = {'E',  'x',  'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                                      0x01, 0x12, 0,   3,   0, 0, 0,   1,   0, 0,  0, 0, 0, 0, 0, 0};
  memcpy(out, big_endian ? big : little, sizeof little);
  out[big_endian ? 25 : 24] = (unsigned char)orientation;
  return sizeof little;
}

// `orientation` 0: no EXIF segment.
static void write_jpeg(const char* folder, const char* name, J_COLOR_SPACE space, int components, int progressive,
                       int restart, int orientation, int big_endian) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  FILE* file = fopen(path, "wb");
  struct jpeg_compress_struct info;
  struct jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, file);
  info.image_width = W;
  info.image_height = H;
  info.input_components = components;
  info.in_color_space = space;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 80, TRUE);
  if (progressive) jpeg_simple_progression(&info);
  info.restart_in_rows = restart;
  jpeg_start_compress(&info, TRUE);
  if (orientation) {
    unsigned char exif[64];
    jpeg_write_marker(&info, JPEG_APP0 + 1, exif, (unsigned)exif_orientation_payload(exif, orientation, big_endian));
  }
  unsigned char row[W * 4];
  while (info.next_scanline < H) {
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < components; ++c) row[x * components + c] = sample(x, (int)info.next_scanline, c);
    JSAMPROW rows[1] = {row};
    jpeg_write_scanlines(&info, rows, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  fclose(file);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT_FOLDER\n", argv[0]);
    return 2;
  }
  const char* out = argv[1];
  write_png(out, "grey.png", PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE);
  write_png(out, "grey-alpha.png", PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE);
  write_png(out, "rgb.png", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE);
  write_png(out, "rgba.png", PNG_COLOR_TYPE_RGB_ALPHA, 8, PNG_INTERLACE_NONE);
  write_png(out, "palette-trns.png", PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE);
  write_png(out, "palette-2bit.png", PNG_COLOR_TYPE_PALETTE, 2, PNG_INTERLACE_NONE);
  write_png(out, "grey-1bit.png", PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE);
  write_png(out, "rgb-16bit.png", PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE);
  write_png(out, "rgb-interlaced.png", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7);
  write_png(out, "rgba-16bit-interlaced.png", PNG_COLOR_TYPE_RGB_ALPHA, 16, PNG_INTERLACE_ADAM7);
  write_jpeg(out, "baseline.jpg", JCS_RGB, 3, 0, 0, 0, 0);
  write_jpeg(out, "progressive.jpg", JCS_RGB, 3, 1, 0, 0, 0);
  write_jpeg(out, "grey.jpg", JCS_GRAYSCALE, 1, 0, 0, 0, 0);
  write_jpeg(out, "grey-progressive.jpg", JCS_GRAYSCALE, 1, 1, 0, 0, 0);
  write_jpeg(out, "cmyk.jpg", JCS_CMYK, 4, 0, 0, 0, 0);
  write_jpeg(out, "restart.jpg", JCS_RGB, 3, 0, 1, 0, 0);
  write_jpeg(out, "exif-orientation-6.jpg", JCS_RGB, 3, 0, 0, 6, 0);
  write_jpeg(out, "exif-orientation-7-big-endian.jpg", JCS_RGB, 3, 0, 0, 7, 1);
  return 0;
}

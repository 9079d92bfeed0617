/* Compresses a PNG with a shipped Plexus model and decompresses it again:
 *   compress_png photo.png photo.pxae decoded.png [quality] */
#include <plexus/codec.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, plexus_codec_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 4) return fprintf(stderr, "usage: %s in.png out.pxae out.png [quality]\n", argv[0]), 2;
  png_image png = {.version = PNG_IMAGE_VERSION};
  if (!png_image_begin_read_from_file(&png, argv[1])) return fprintf(stderr, "%s\n", png.message), 1;
  png.format = PNG_FORMAT_RGB;
  uint8_t* pixels = malloc(PNG_IMAGE_SIZE(png));
  if (!pixels || !png_image_finish_read(&png, NULL, pixels, 0, NULL)) return fprintf(stderr, "%s\n", png.message), 1;
  plexus_codec_model* model = NULL;
  if (plexus_codec_open_quality(argc > 4 ? atof(argv[4]) : 3, "cpu", &model)) return fail("open");
  uint8_t* file = NULL;
  size_t file_size = 0;
  if (plexus_codec_encode_rgb(model, pixels, png.width, png.height, png.width * 3, &file, &file_size))
    return fail("encode");
  FILE* out = fopen(argv[2], "wb");
  if (!out || fwrite(file, 1, file_size, out) != file_size || fclose(out)) return perror(argv[2]), 1;
  plexus_codec_info info;
  if (plexus_codec_get_info(file, file_size, &info)) return fail("info");
  if (plexus_codec_decode_rgb(model, file, file_size, pixels, PNG_IMAGE_SIZE(png), info.width * 3))
    return fail("decode");
  printf("%ux%u: %zu bytes, %.4f bpp\n", info.width, info.height, file_size,
         8.0 * file_size / (info.width * info.height));
  if (!png_image_write_to_file(&png, argv[3], 0, pixels, 0, NULL)) return fprintf(stderr, "%s\n", png.message), 1;
  plexus_codec_free(file);
  plexus_codec_close(model);
  free(pixels);
  return 0;
}

/* The Plexus image codec as a C library (libplexus_codec): open a trained
 * model, compress 8-bit RGB or RGBA pixels into the bytes of a .pxae file,
 * read a file's info without a model, and decompress into the caller's
 * buffer. In the manner of libwebp: plain C, a version macro checked when a
 * model is opened, and every failure a status code plus a message from
 * plexus_codec_last_error(); no C++ exception leaves the library.
 *
 *   plexus_codec_model* model = NULL;
 *   if (plexus_codec_open_quality(3, "cpu", &model) != PLEXUS_CODEC_OK) {
 *     fprintf(stderr, "%s\n", plexus_codec_last_error());
 *   }
 *   uint8_t* file = NULL;
 *   size_t file_size = 0;
 *   plexus_codec_encode_rgb(model, rgb, width, height, width * 3, &file, &file_size);
 *   plexus_codec_info info;
 *   plexus_codec_get_info(file, file_size, &info);
 *   plexus_codec_decode_rgb(model, file, file_size, pixels, info.height * stride, stride);
 *   plexus_codec_free(file);
 *   plexus_codec_close(model);
 *
 * Build: pkg-config --cflags --libs plexus-codec, or in CMake
 * find_package(plexus COMPONENTS codec) and target_link_libraries(app plexus::codec).
 * A model handle is used by one thread at a time; different handles may be
 * used at once. The file format is docs/bitstream.md. */
#ifndef PLEXUS_CODEC_H
#define PLEXUS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this interface: major << 8 | minor. A library accepts a
 * program built against the same major version (a new minor version only
 * adds functions). */
#define PLEXUS_CODEC_ABI_VERSION 0x0100

typedef enum plexus_codec_status {
  PLEXUS_CODEC_OK = 0,
  PLEXUS_CODEC_INVALID_ARGUMENT = 1, /* a null pointer, a bad size or stride, an unknown device or quality */
  PLEXUS_CODEC_BAD_FILE = 2,         /* bytes that are not a valid file (for this model) */
  PLEXUS_CODEC_BUFFER_TOO_SMALL = 3, /* the output buffer cannot hold the image */
  PLEXUS_CODEC_MODEL_ERROR = 4,      /* a model file that cannot be read or used as a codec */
  PLEXUS_CODEC_DEVICE_ERROR = 5,     /* the device is not available (no GPU, a CUDA failure) */
  PLEXUS_CODEC_OUT_OF_MEMORY = 6,
  PLEXUS_CODEC_ABI_MISMATCH = 7, /* the program was built against another major version */
  PLEXUS_CODEC_INTERNAL_ERROR = 8
} plexus_codec_status;

/* What a file says about itself, read without its model. */
typedef struct plexus_codec_info {
  uint32_t width, height;
  uint64_t model_fingerprint; /* the model that decodes it (plexus_codec_model_fingerprint) */
  uint16_t format_version;    /* 1 to 5 */
  int grey;                   /* nonzero: the source image was grey (decoded R = G = B) */
  int variable_rate;          /* nonzero: a variable-rate model wrote it at rate_level */
  double rate_level;
} plexus_codec_info;

/* An opened model; plexus_codec_close releases it. */
typedef struct plexus_codec_model plexus_codec_model;

/* The library's PLEXUS_CODEC_ABI_VERSION. */
int plexus_codec_abi_version(void);

/* The message of the last failure on this thread ("" when none). Valid
 * until the next call of this library on the thread. */
const char* plexus_codec_last_error(void);

/* Open a model file written by plexus-ae train or export (model.safetensors),
 * on `device`: "cpu", "cuda", "cuda:N" or "auto" (CUDA when a GPU is
 * visible; NULL is "auto"). A variable-rate model encodes at level 0 until
 * plexus_codec_set_level. */
plexus_codec_status plexus_codec_open_file_abi(int abi_version, const char* path, const char* device,
                                               plexus_codec_model** model);
/* Open the shipped model of `quality` (1 to 6; fractional between the levels
 * of a variable-rate model), as plexus-ae compress --quality: the catalog
 * <prefix>/share/plexus/autoencoder/trained/quality-catalog.json of the
 * library's prefix, or $PLEXUS_AE_QUALITY_CATALOG. */
plexus_codec_status plexus_codec_open_quality_abi(int abi_version, double quality, const char* device,
                                                  plexus_codec_model** model);
static inline plexus_codec_status plexus_codec_open_file(const char* path, const char* device,
                                                         plexus_codec_model** model) {
  return plexus_codec_open_file_abi(PLEXUS_CODEC_ABI_VERSION, path, device, model);
}
static inline plexus_codec_status plexus_codec_open_quality(double quality, const char* device,
                                                            plexus_codec_model** model) {
  return plexus_codec_open_quality_abi(PLEXUS_CODEC_ABI_VERSION, quality, device, model);
}
/* Releases the model; NULL is allowed. */
void plexus_codec_close(plexus_codec_model* model);

/* A variable-rate model's levels K (0: a model of one rate), and the rate
 * level encode uses, in [0, K-1] (fractional levels interpolate). */
int plexus_codec_rate_levels(const plexus_codec_model* model);
plexus_codec_status plexus_codec_set_level(plexus_codec_model* model, double level);
/* The fingerprint of the model: a file it wrote carries it (plexus_codec_info). */
uint64_t plexus_codec_model_fingerprint(const plexus_codec_model* model);

/* Reads the info of a whole file (its checksum and layout checked) without a model. */
plexus_codec_status plexus_codec_get_info(const uint8_t* data, size_t size, plexus_codec_info* info);

/* Compresses width x height pixels, rows `stride` bytes apart, 3 bytes a
 * pixel (R, G, B) or 4 (R, G, B, A; alpha is not coded). *output receives a
 * buffer from malloc holding the file, *output_size its length; the caller
 * releases it with plexus_codec_free. */
plexus_codec_status plexus_codec_encode_rgb(plexus_codec_model* model, const uint8_t* rgb, uint32_t width,
                                            uint32_t height, size_t stride, uint8_t** output, size_t* output_size);
plexus_codec_status plexus_codec_encode_rgba(plexus_codec_model* model, const uint8_t* rgba, uint32_t width,
                                             uint32_t height, size_t stride, uint8_t** output, size_t* output_size);

/* Decompresses a file into the caller's buffer of `output_size` bytes, rows
 * `stride` bytes apart: 3 bytes a pixel, or 4 with alpha 255. The buffer
 * holds at least (height - 1) * stride + width * (3 or 4) bytes (the size
 * from plexus_codec_get_info). The file must have been written by this model. */
plexus_codec_status plexus_codec_decode_rgb(plexus_codec_model* model, const uint8_t* data, size_t size,
                                            uint8_t* output, size_t output_size, size_t stride);
plexus_codec_status plexus_codec_decode_rgba(plexus_codec_model* model, const uint8_t* data, size_t size,
                                             uint8_t* output, size_t output_size, size_t stride);

/* Releases a buffer the library returned; NULL is allowed. */
void plexus_codec_free(void* buffer);

#ifdef __cplusplus
}
#endif

#endif /* PLEXUS_CODEC_H */

/* Hashes of decoded JPEG pixels and of libm results, to compare two machines
 * whose CPU training differs (the inputs and the math library as causes):
 *   gcc -O2 -o probe lab/checks/cpu-platform-probe.c -ljpeg -lm
 *   ./probe data/train-sample/IMAGE.jpg ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <jpeglib.h>
#include <gnu/libc-version.h>
static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = p; for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ULL; } return h; }
int main(int argc, char** argv) {
  printf("glibc %s, libjpeg %d", gnu_get_libc_version(), JPEG_LIB_VERSION);
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
  printf(" turbo %d", LIBJPEG_TURBO_VERSION_NUMBER);
#endif
  printf("\n");
  for (int a = 1; a < argc; ++a) {
    FILE* f = fopen(argv[a], "rb"); if (!f) continue;
    struct jpeg_decompress_struct d; struct jpeg_error_mgr e; d.err = jpeg_std_error(&e);
    jpeg_create_decompress(&d); jpeg_stdio_src(&d, f); jpeg_read_header(&d, TRUE);
    d.out_color_space = JCS_RGB; jpeg_start_decompress(&d);
    size_t row = (size_t)d.output_width * d.output_components; unsigned char* buf = malloc(row);
    uint64_t h = 1469598103934665603ULL;
    while (d.output_scanline < d.output_height) { JSAMPROW r = buf; jpeg_read_scanlines(&d, &r, 1); h = fnv(h, buf, row); }
    printf("%s %ux%u %016llx\n", argv[a], d.output_width, d.output_height, (unsigned long long)h);
    jpeg_finish_decompress(&d); jpeg_destroy_decompress(&d); free(buf); fclose(f);
  }
  const char* names[] = {"expf","logf","log1pf","expm1f","tanhf","powf","erfcf","exp","log","log1p","expm1","tanh","pow","erfc","sqrtf"};
  for (int k = 0; k < 15; ++k) {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < 2000000; ++i) {
      double x = -20.0 + 40.0 * (i / 2000000.0) + 1e-7 * (i % 7);
      float xf = (float)x, rf = 0; double rd = 0;
      switch (k) {
        case 0: rf = expf(xf); break; case 1: rf = logf(fabsf(xf) + 1e-6f); break; case 2: rf = log1pf(fabsf(xf)); break;
        case 3: rf = expm1f(xf); break; case 4: rf = tanhf(xf); break; case 5: rf = powf(fabsf(xf), 0.37f); break;
        case 6: rf = erfcf(xf / 4); break; case 7: rd = exp(x); break; case 8: rd = log(fabs(x) + 1e-6); break;
        case 9: rd = log1p(fabs(x)); break; case 10: rd = expm1(x); break; case 11: rd = tanh(x); break;
        case 12: rd = pow(fabs(x), 0.37); break; case 13: rd = erfc(x / 4); break; case 14: rf = sqrtf(fabsf(xf)); break;
      }
      if (k < 7 || k == 14) h = fnv(h, &rf, sizeof rf); else h = fnv(h, &rd, sizeof rd);
    }
    printf("%-7s %016llx\n", names[k], (unsigned long long)h);
  }
  return 0;
}

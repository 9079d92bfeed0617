// CPU im2col / col2im (definitions in im2col.h).
#include "convolution/im2col.h"

#include <algorithm>

#include "plexus/checked_math.h"

namespace plexus::layers {

std::string column_size_problem(const ConvGeometry& g) {
  std::int64_t rows = 0, cols = 0, size = 0, image = 0;
  if (__builtin_mul_overflow(g.channels, g.kernel * g.kernel, &rows) ||
      __builtin_mul_overflow(g.patches_high, g.patches_wide, &cols) || __builtin_mul_overflow(rows, cols, &size) ||
      size > limits::kMaxTensorElements)
    return "its im2col matrix of " + std::to_string(g.channels) + "*" + std::to_string(g.kernel) + "*" +
           std::to_string(g.kernel) + " rows by " + std::to_string(g.patches_high) + "*" +
           std::to_string(g.patches_wide) + " columns would exceed " + std::to_string(limits::kMaxTensorElements) +
           " elements";
  if (__builtin_mul_overflow(g.channels, g.height, &image) || __builtin_mul_overflow(image, g.width, &image) ||
      image > limits::kMaxTensorElements)
    return "its image of " + std::to_string(g.channels) + "x" + std::to_string(g.height) + "x" +
           std::to_string(g.width) + " would exceed " + std::to_string(limits::kMaxTensorElements) + " elements";
  return "";
}

std::int64_t images_per_chunk(std::int64_t scratch_per_image, std::size_t element_size, std::int64_t batch,
                              std::size_t max_bytes) {
  const std::size_t bytes_per_image =
      static_cast<std::size_t>(std::max<std::int64_t>(scratch_per_image, 1)) * element_size;
  const auto fitting = static_cast<std::int64_t>(max_bytes / bytes_per_image);
  return std::max<std::int64_t>(1, std::min(fitting, batch));
}

// columns[(c*k + i)*k + j, (a - first)*Pw + b] = x[c, a*s - p + i, b*s - p + j]
// for a in [first, end), 0 in the padding.
template <typename T>
void im2col_rows_cpu(const T* image, const ConvGeometry& g, std::int64_t first_patch_row, std::int64_t end_patch_row,
                     T* columns) {
  const std::int64_t patches = (end_patch_row - first_patch_row) * g.patches_wide;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    const T* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel; ++i) {
      for (std::int64_t j = 0; j < g.kernel; ++j) {
        T* row = columns + ((c * g.kernel + i) * g.kernel + j) * patches;
        for (std::int64_t a = first_patch_row; a < end_patch_row; ++a) {
          const std::int64_t y = a * g.stride - g.padding + i;
          T* out = row + (a - first_patch_row) * g.patches_wide;
          if (y < 0 || y >= g.height) {
            std::fill(out, out + g.patches_wide, T(0));
            continue;
          }
          for (std::int64_t b = 0; b < g.patches_wide; ++b) {
            const std::int64_t x = b * g.stride - g.padding + j;
            out[b] = (x >= 0 && x < g.width) ? plane[y * g.width + x] : T(0);
          }
        }
      }
    }
  }
}

template <typename T>
void im2col_cpu(const T* image, const ConvGeometry& g, T* columns) {
  im2col_rows_cpu(image, g, 0, g.patches_high, columns);
}

// image[c, y, x] += columns[(c*k + i)*k + j, (a - first)*Pw + b] over all
// (i, j, a, b) with a in [first, end), a*s - p + i == y in [first_image_row,
// end_image_row) and b*s - p + j == x; for one pixel the loops meet its terms
// in rising (i, j), as col2im's.
template <typename T>
void col2im_rows_cpu(const T* columns, const ConvGeometry& g, std::int64_t first_patch_row, std::int64_t end_patch_row,
                     std::int64_t first_image_row, std::int64_t end_image_row, T* image) {
  const std::int64_t patches = (end_patch_row - first_patch_row) * g.patches_wide;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    T* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel; ++i) {
      for (std::int64_t j = 0; j < g.kernel; ++j) {
        const T* row = columns + ((c * g.kernel + i) * g.kernel + j) * patches;
        for (std::int64_t a = first_patch_row; a < end_patch_row; ++a) {
          const std::int64_t y = a * g.stride - g.padding + i;
          if (y < first_image_row || y >= end_image_row) continue;
          const T* in = row + (a - first_patch_row) * g.patches_wide;
          for (std::int64_t b = 0; b < g.patches_wide; ++b) {
            const std::int64_t x = b * g.stride - g.padding + j;
            if (x >= 0 && x < g.width) plane[y * g.width + x] += in[b];
          }
        }
      }
    }
  }
}

template <typename T>
void col2im_patches_cpu(const T* columns, const ConvGeometry& g, std::int64_t first_patch, std::int64_t end_patch,
                        std::int64_t first_image_row, std::int64_t end_image_row, T* image) {
  const std::int64_t patches = end_patch - first_patch;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    T* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel; ++i) {
      for (std::int64_t j = 0; j < g.kernel; ++j) {
        const T* row = columns + ((c * g.kernel + i) * g.kernel + j) * patches - first_patch;
        for (std::int64_t q = first_patch; q < end_patch;) {
          const std::int64_t a = q / g.patches_wide, row_end = std::min(end_patch, (a + 1) * g.patches_wide);
          const std::int64_t y = a * g.stride - g.padding + i;
          if (y >= first_image_row && y < end_image_row) {
            for (std::int64_t b = q - a * g.patches_wide; q < row_end; ++q, ++b) {
              const std::int64_t x = b * g.stride - g.padding + j;
              if (x >= 0 && x < g.width) plane[y * g.width + x] += row[q];
            }
          }
          q = row_end;
        }
      }
    }
  }
}

// image[c, y, x] = sum of columns[(c*k + i)*k + j, a*Pw + b] over all (i, j, a, b)
// with a*s - p + i == y and b*s - p + j == x (the adjoint of im2col).
template <typename T>
void col2im_cpu(const T* columns, const ConvGeometry& g, T* image) {
  std::fill(image, image + g.image_size(), T(0));
  col2im_rows_cpu(columns, g, 0, g.patches_high, 0, g.height, image);
}

template void im2col_cpu<float>(const float*, const ConvGeometry&, float*);
template void im2col_cpu<double>(const double*, const ConvGeometry&, double*);
template void col2im_cpu<float>(const float*, const ConvGeometry&, float*);
template void col2im_cpu<double>(const double*, const ConvGeometry&, double*);
template void im2col_rows_cpu<float>(const float*, const ConvGeometry&, std::int64_t, std::int64_t, float*);
template void im2col_rows_cpu<double>(const double*, const ConvGeometry&, std::int64_t, std::int64_t, double*);
template void col2im_patches_cpu<float>(const float*, const ConvGeometry&, std::int64_t, std::int64_t, std::int64_t,
                                        std::int64_t, float*);
template void col2im_patches_cpu<double>(const double*, const ConvGeometry&, std::int64_t, std::int64_t, std::int64_t,
                                         std::int64_t, double*);
template void col2im_rows_cpu<float>(const float*, const ConvGeometry&, std::int64_t, std::int64_t, std::int64_t,
                                     std::int64_t, float*);
template void col2im_rows_cpu<double>(const double*, const ConvGeometry&, std::int64_t, std::int64_t, std::int64_t,
                                      std::int64_t, double*);

}  // namespace plexus::layers

#pragma once
// im2col / col2im: a 2-D convolution as a matrix product (Chellapilla et al.
// 2006; Caffe). Shared by Conv2d and ConvTranspose2d.
//
// An image x[c, h, w] (C x H x W) is unfolded into a column matrix
//   columns[(c*k + i)*k + j, a*Pw + b] = x[c, a*s - p + i, b*s - p + j]
// (zero where the index falls in the padding), of K = C*k*k rows and
// P = Ph*Pw columns, one per kernel position, Ph = (H + 2p - k)/s + 1.
// Then Conv2d is y = W columns with W viewed as [out, C*k*k].
// col2im is the adjoint of im2col: it sums every column entry back onto the
// image pixel it was copied from, so <im2col(x), c> == <x, col2im(c)>.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plexus/context.h"

namespace plexus::layers {

struct ConvGeometry {
  std::int64_t channels = 0;  // of the image side
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  // Pixels between neighbouring kernel taps. The functions of this file
  // take dilation 1 only; grouped_convolution.cpp and .cu unfold dilated
  // kernels (tap (i, j) reads x[c, a*s - p + i*d, b*s - p + j*d]).
  std::int64_t dilation = 1;
  std::int64_t patches_high = 0;  // Ph: kernel positions down (the conv output height)
  std::int64_t patches_wide = 0;  // Pw: kernel positions across (the conv output width)

  std::int64_t column_rows() const { return channels * kernel * kernel; }   // K
  std::int64_t column_cols() const { return patches_high * patches_wide; }  // P
  std::int64_t column_size() const { return column_rows() * column_cols(); }
  std::int64_t image_size() const { return channels * height * width; }
};

// "" when the column matrix [C*k*k, Ph*Pw] and the image [C, H, W] fit in
// limits::kMaxTensorElements each, else why not (checked, without overflow).
std::string column_size_problem(const ConvGeometry& geometry);

// How many images to process at once on the GPU so that their scratch
// (`scratch_per_image` elements each: columns plus a per-image weight
// gradient) stays within `max_bytes`; at least 1, at most `batch`.
std::int64_t images_per_chunk(std::int64_t scratch_per_image, std::size_t element_size, std::int64_t batch,
                              std::size_t max_bytes);

// CPU, one image. im2col writes every entry of columns [K, P]; col2im
// OVERWRITES image [C, H, W] with the adjoint sum.
template <typename T>
void im2col_cpu(const T* image, const ConvGeometry& geometry, T* columns);
template <typename T>
void col2im_cpu(const T* columns, const ConvGeometry& geometry, T* image);

// The same on a band of rows, so that a part of one image can be computed on
// its own (convolution.cpp's blocks).
// im2col_rows_cpu writes the columns of the patch rows [first_patch_row,
// end_patch_row): columns [K, (end - first) * Pw], entry (r, (a - first)*Pw + b)
// as im2col's (r, a*Pw + b).
template <typename T>
void im2col_rows_cpu(const T* image, const ConvGeometry& geometry, std::int64_t first_patch_row,
                     std::int64_t end_patch_row, T* columns);
// col2im_rows_cpu ADDS to the image rows [first_image_row, end_image_row) the
// entries of `columns` (laid out as im2col_rows_cpu's, for the patch rows
// [first_patch_row, end_patch_row)) that col2im sums onto them, in col2im's
// order for each pixel: rising (c, i, j). Other rows are not touched.
template <typename T>
void col2im_rows_cpu(const T* columns, const ConvGeometry& geometry, std::int64_t first_patch_row,
                     std::int64_t end_patch_row, std::int64_t first_image_row, std::int64_t end_image_row, T* image);
// The same for the patches [first_patch, end_patch) in im2col's numbering
// (a*Pw + b; whole patch rows or not): columns [K, end - first], entry
// (r, q - first) as im2col's (r, q). Each pixel still gets its terms in
// rising (c, i, j), which for one pixel is falling q: so calls on adjacent
// ranges of patches, the last range first, sum every pixel in exactly
// col2im's order.
template <typename T>
void col2im_patches_cpu(const T* columns, const ConvGeometry& geometry, std::int64_t first_patch,
                        std::int64_t end_patch, std::int64_t first_image_row, std::int64_t end_image_row, T* image);

// CUDA, `count` consecutive images ([count, C, H, W] <-> [count, K, P]) on
// the context's stream; same semantics as the CPU versions.
template <typename T>
void im2col_cuda(const Context& ctx, const T* images, const ConvGeometry& geometry, std::int64_t count, T* columns);
template <typename T>
void col2im_cuda(const Context& ctx, const T* columns, const ConvGeometry& geometry, std::int64_t count, T* images);

}  // namespace plexus::layers

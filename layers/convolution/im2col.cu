// CUDA im2col / col2im (definitions and formulas in im2col.h).
#include "convolution/im2col.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// columns[n, (c*k + i)*k + j, a*Pw + b] = x[n, c, a*s - p + i, b*s - p + j]  (0 in the padding)
// One thread per (n, c, a, b) writing its k*k entries: neighbouring threads
// write neighbouring b, so every store of a warp is coalesced; grid-stride.
template <typename T>
__global__ void im2col_kernel(const T* images, long long count, long long channels, long long height, long long width,
                              int kernel, int stride, int padding, long long patches_high, long long patches_wide,
                              T* columns) {
  const long long patches = patches_high * patches_wide;
  const long long total = count * channels * patches;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long b = index % patches_wide;
    const long long a = (index / patches_wide) % patches_high;
    const long long image_channel = index / patches;  // n*C + c
    const T* plane = images + image_channel * height * width;
    // Row (c*k + i)*k + j of image n starts at (n*K + (c*k + i)*k + j)*P with K = C*k*k.
    T* out = columns + image_channel * kernel * kernel * patches + a * patches_wide + b;
    const long long y0 = a * stride - padding;
    const long long x0 = b * stride - padding;
    for (int i = 0; i < kernel; ++i) {
      const long long y = y0 + i;
      const bool row_inside = y >= 0 && y < height;
      for (int j = 0; j < kernel; ++j) {
        const long long x = x0 + j;
        *out = (row_inside && x >= 0 && x < width) ? plane[y * width + x] : T(0);
        out += patches;
      }
    }
  }
}

// x[n, c, y, x] = sum of columns[n, (c*k + i)*k + j, a*Pw + b] over the (i, j)
// with y + p - i = a*s, x + p - j = b*s, 0 <= a < Ph, 0 <= b < Pw (adjoint of im2col).
// One thread per image element gathering its <= ceil(k/s)^2 terms: each
// output is written once, so no atomics and a deterministic sum; grid-stride.
template <typename T>
__global__ void col2im_kernel(const T* columns, long long count, long long channels, long long height, long long width,
                              int kernel, int stride, int padding, long long patches_high, long long patches_wide,
                              T* images) {
  const long long patches = patches_high * patches_wide;
  const long long total = count * channels * height * width;
  for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
       index += (long long)gridDim.x * blockDim.x) {
    const long long x = index % width;
    const long long y = (index / width) % height;
    const long long image_channel = index / (height * width);  // n*C + c
    const T* column = columns + image_channel * kernel * kernel * patches;
    T sum = T(0);
    // i must be congruent to y + p modulo s; a = (y + p - i)/s falls as i rises.
    for (int i = static_cast<int>((y + padding) % stride); i < kernel; i += stride) {
      const long long a_scaled = y + padding - i;
      if (a_scaled < 0) break;
      const long long a = a_scaled / stride;
      if (a >= patches_high) continue;
      for (int j = static_cast<int>((x + padding) % stride); j < kernel; j += stride) {
        const long long b_scaled = x + padding - j;
        if (b_scaled < 0) break;
        const long long b = b_scaled / stride;
        if (b >= patches_wide) continue;
        sum += column[(i * kernel + j) * patches + a * patches_wide + b];
      }
    }
    images[index] = sum;
  }
}

}  // namespace

template <typename T>
void im2col_cuda(const Context& ctx, const T* images, const ConvGeometry& g, std::int64_t count, T* columns) {
  const long long threads = count * g.channels * g.column_cols();
  if (threads == 0) return;
  im2col_kernel<T><<<cuda::blocks_for(threads), 256, 0, cuda::stream(ctx)>>>(
      images, count, g.channels, g.height, g.width, static_cast<int>(g.kernel), static_cast<int>(g.stride),
      static_cast<int>(g.padding), g.patches_high, g.patches_wide, columns);
  cuda::check_launch("im2col_kernel", __FILE__, __LINE__);
}

template <typename T>
void col2im_cuda(const Context& ctx, const T* columns, const ConvGeometry& g, std::int64_t count, T* images) {
  const long long threads = count * g.image_size();
  if (threads == 0) return;
  col2im_kernel<T><<<cuda::blocks_for(threads), 256, 0, cuda::stream(ctx)>>>(
      columns, count, g.channels, g.height, g.width, static_cast<int>(g.kernel), static_cast<int>(g.stride),
      static_cast<int>(g.padding), g.patches_high, g.patches_wide, images);
  cuda::check_launch("col2im_kernel", __FILE__, __LINE__);
}

template void im2col_cuda<float>(const Context&, const float*, const ConvGeometry&, std::int64_t, float*);
template void im2col_cuda<double>(const Context&, const double*, const ConvGeometry&, std::int64_t, double*);
template void col2im_cuda<float>(const Context&, const float*, const ConvGeometry&, std::int64_t, float*);
template void col2im_cuda<double>(const Context&, const double*, const ConvGeometry&, std::int64_t, double*);

}  // namespace plexus::layers

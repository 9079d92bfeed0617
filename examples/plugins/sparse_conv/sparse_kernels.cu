// The CUDA sparse convolution kernels (formulas in sparse_filter.h).
#include <cstdint>
#include <vector>

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/error.h"
#include "plexus/layer.h"
#include "sparse_kernels.h"

namespace sparse_conv::cuda {

namespace {

constexpr int kThreads = 256;

// One device allocation holding a copy of a host vector; freed with the filter.
class DeviceArray {
 public:
  DeviceArray() = default;
  template <typename V>
  explicit DeviceArray(const std::vector<V>& host) {
    const std::size_t bytes = host.size() * sizeof(V);
    if (bytes == 0) return;
    plexus::cuda::check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc", __FILE__, __LINE__);
    plexus::cuda::check_cuda(cudaMemcpy(data_, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy", __FILE__,
                             __LINE__);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~DeviceArray() {
    if (data_) cudaFree(data_);  // a failure here cannot be reported: destructors do not throw
  }
  template <typename V>
  const V* as() const {
    return static_cast<const V*>(data_);
  }

 private:
  void* data_ = nullptr;
};

template <typename V>
std::vector<V> converted(const std::vector<double>& values) {
  return std::vector<V>(values.begin(), values.end());
}

struct DeviceRows {
  DeviceArray row_start, value, tap;
};

// Rows grouped by small channel a:
//   small[n, a, sy, sx] = sum over the row's taps of W big[n, b, sy s - p + ky, sx s - p + kx]
// Grid (pixel tiles, a, n), one thread per small pixel: all threads of a
// block walk the same row (the tap loads are broadcasts) and read
// neighbouring big pixels.
template <typename T>
__global__ void rows_to_small_kernel(const std::int32_t* row_start, const T* value, const std::uint16_t* tap,
                                     ConvGeometry g, const T* big, T* small) {
  const long long pixel = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (pixel >= g.small_height * g.small_width) return;
  const long long a = blockIdx.y, n = blockIdx.z;
  const long long sy = pixel / g.small_width, sx = pixel % g.small_width;
  const T* big_image = big + n * g.big_channels * g.big_height * g.big_width;
  T sum = T(0);
  for (int t = row_start[a]; t < row_start[a + 1]; ++t) {
    const int code = tap[t];
    const long long y = sy * g.stride - g.padding + (code >> 4 & 15), x = sx * g.stride - g.padding + (code & 15);
    if (y < 0 || y >= g.big_height || x < 0 || x >= g.big_width) continue;
    sum += value[t] * big_image[((code >> 8) * g.big_height + y) * g.big_width + x];
  }
  small[((n * g.small_channels + a) * g.small_height + sy) * g.small_width + sx] = sum;
}

// Rows grouped by big channel b and phase (py, px) = (y mod s, x mod s):
//   big[n, b, y, x] = sum over the taps of row b s^2 + py s + px of
//                     W small[n, a, (y + p - ky) / s, (x + p - kx) / s]   (exact divisions, inside only)
// Grid (pixel tiles, b, n s^2 + phase): a block covers pixels of one phase,
// y = py + s j, x = px + s i, so all its threads walk the same row (broadcast
// tap loads, every tap meets every pixel) and read neighbouring small pixels;
// the price is stores s elements apart.
template <typename T>
__global__ void rows_to_big_kernel(const std::int32_t* row_start, const T* value, const std::uint16_t* tap,
                                   ConvGeometry g, const T* small, T* big) {
  const long long s = g.stride;
  const long long phase = blockIdx.z % (s * s), n = blockIdx.z / (s * s), b = blockIdx.y;
  const long long py = phase / s, px = phase % s;
  const long long rows_here = (g.big_height - py + s - 1) / s, cols_here = (g.big_width - px + s - 1) / s;
  const long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (j >= rows_here * cols_here) return;
  const long long y = py + s * (j / cols_here), x = px + s * (j % cols_here);
  const T* small_image = small + n * g.small_channels * g.small_height * g.small_width;
  const long long row = b * s * s + phase;
  T sum = T(0);
  for (int t = row_start[row]; t < row_start[row + 1]; ++t) {
    const int code = tap[t];
    const long long ty = y + g.padding - (code >> 4 & 15), tx = x + g.padding - (code & 15);
    if (ty < 0 || tx < 0) continue;
    const long long sy = ty / s, sx = tx / s;
    if (sy >= g.small_height || sx >= g.small_width) continue;
    sum += value[t] * small_image[((code >> 8) * g.small_height + sy) * g.small_width + sx];
  }
  big[((n * g.big_channels + b) * g.big_height + y) * g.big_width + x] = sum;
}

// COO: one thread per (non-zero, image, small pixel), grid-stride; it adds
// W * source into its destination element with an atomic add, since many
// non-zeros meet in one element (so the summation order, and the last bits
// of an f32 result, vary from run to run).
template <typename T>
__global__ void coo_scatter_kernel(const T* value, const std::int32_t* small_channel, const std::int32_t* big_channel,
                                   const std::int32_t* ky, const std::int32_t* kx, long long nonzeros, ConvGeometry g,
                                   bool to_small, const T* source, T* destination) {
  const long long pixels = g.small_height * g.small_width;
  const long long total = nonzeros * g.batch * pixels;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long pixel = e % pixels, n = (e / pixels) % g.batch, i = e / (pixels * g.batch);
    const long long sy = pixel / g.small_width, sx = pixel % g.small_width;
    const long long y = sy * g.stride - g.padding + ky[i], x = sx * g.stride - g.padding + kx[i];
    if (y < 0 || y >= g.big_height || x < 0 || x >= g.big_width) continue;
    const long long s = ((n * g.small_channels + small_channel[i]) * g.small_height + sy) * g.small_width + sx;
    const long long b = ((n * g.big_channels + big_channel[i]) * g.big_height + y) * g.big_width + x;
    if (to_small) atomicAdd(&destination[s], value[i] * source[b]);
    else atomicAdd(&destination[b], value[i] * source[s]);
  }
}

// out[n, c, i] += bias[c]; one thread per element, grid-stride.
template <typename T>
__global__ void add_bias_kernel(const T* bias, T* out, long long count, long long channels, long long pixels) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x)
    out[e] += bias[(e / pixels) % channels];
}

// (pixel tiles, channels, images): one block per tile of 256 pixels of one channel of one image.
dim3 row_grid(long long pixels, long long channels, long long images) {
  if (channels > 65535 || images > 65535)
    throw plexus::ShapeError("sparse convolution: " + std::to_string(channels) + " channels, " +
                             std::to_string(images) +
                             " images (times stride^2 for the big side): the CUDA grid "
                             "allows at most 65535 of each");
  return dim3(static_cast<unsigned int>((pixels + kThreads - 1) / kThreads), static_cast<unsigned int>(channels),
              static_cast<unsigned int>(images));
}

}  // namespace

struct DeviceFilter {
  plexus::DType dtype;
  long long nonzeros = 0;
  DeviceArray coo_value, coo_small, coo_big, coo_ky, coo_kx;
  bool has_rows = false;
  DeviceRows by_small, by_big;
};

namespace {

template <typename T>
DeviceRows upload_rows(const TapRows& rows) {
  return {DeviceArray(rows.row_start), DeviceArray(converted<T>(rows.value)), DeviceArray(rows.tap)};
}

}  // namespace

std::shared_ptr<DeviceFilter> upload(const SparseFilter& filter, plexus::DType dtype) {
  auto device = std::make_shared<DeviceFilter>();
  device->dtype = dtype;
  device->nonzeros = filter.nonzeros();
  device->has_rows = filter.has_rows;
  plexus::dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    device->coo_value = DeviceArray(converted<T>(filter.coo.value));
    if (filter.has_rows) {
      device->by_small = upload_rows<T>(filter.by_small);
      device->by_big = upload_rows<T>(filter.by_big);
    }
  });
  device->coo_small = DeviceArray(filter.coo.small_channel);
  device->coo_big = DeviceArray(filter.coo.big_channel);
  device->coo_ky = DeviceArray(filter.coo.ky);
  device->coo_kx = DeviceArray(filter.coo.kx);
  return device;
}

namespace {

template <typename T>
void coo_scatter(plexus::Context& ctx, const DeviceFilter& f, const ConvGeometry& g, bool to_small,
                 const plexus::Tensor& source, plexus::Tensor& destination) {
  plexus::cuda::check_cuda(cudaMemsetAsync(destination.data<T>(), 0, destination.nbytes(), plexus::cuda::stream(ctx)),
                           "cudaMemsetAsync", __FILE__, __LINE__);
  const long long total = f.nonzeros * g.batch * g.small_height * g.small_width;
  if (total == 0) return;
  coo_scatter_kernel<T><<<plexus::cuda::blocks_for(total, kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
      f.coo_value.as<T>(), f.coo_small.as<std::int32_t>(), f.coo_big.as<std::int32_t>(), f.coo_ky.as<std::int32_t>(),
      f.coo_kx.as<std::int32_t>(), f.nonzeros, g, to_small, source.data<T>(), destination.data<T>());
  plexus::cuda::check_launch("coo_scatter_kernel", __FILE__, __LINE__);
}

void check_dtype(const DeviceFilter& f, const plexus::Tensor& t) {
  if (t.dtype() != f.dtype)
    throw plexus::Error("sparse convolution: the device filter is " + std::string(plexus::dtype_name(f.dtype)) +
                        " but the tensor is " + t.describe());
}

}  // namespace

void to_small(plexus::Context& ctx, const DeviceFilter& f, SparseFormat format, const ConvGeometry& g,
              const plexus::Tensor& big, plexus::Tensor& small) {
  check_dtype(f, big);
  if (small.numel() == 0) return;
  plexus::dispatch_float(big.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (format == SparseFormat::coo) return coo_scatter<T>(ctx, f, g, true, big, small);
    rows_to_small_kernel<T><<<row_grid(g.small_height * g.small_width, g.small_channels, g.batch), kThreads, 0,
                              plexus::cuda::stream(ctx)>>>(f.by_small.row_start.as<std::int32_t>(),
                                                           f.by_small.value.as<T>(), f.by_small.tap.as<std::uint16_t>(),
                                                           g, big.data<T>(), small.data<T>());
    plexus::cuda::check_launch("rows_to_small_kernel", __FILE__, __LINE__);
  });
}

void to_big(plexus::Context& ctx, const DeviceFilter& f, SparseFormat format, const ConvGeometry& g,
            const plexus::Tensor& small, plexus::Tensor& big) {
  check_dtype(f, small);
  if (big.numel() == 0) return;
  plexus::dispatch_float(small.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (format == SparseFormat::coo) return coo_scatter<T>(ctx, f, g, false, small, big);
    const long long phase_pixels =
        ((g.big_height + g.stride - 1) / g.stride) * ((g.big_width + g.stride - 1) / g.stride);
    rows_to_big_kernel<T><<<row_grid(phase_pixels, g.big_channels, g.batch * g.stride * g.stride), kThreads, 0,
                            plexus::cuda::stream(ctx)>>>(f.by_big.row_start.as<std::int32_t>(), f.by_big.value.as<T>(),
                                                         f.by_big.tap.as<std::uint16_t>(), g, small.data<T>(),
                                                         big.data<T>());
    plexus::cuda::check_launch("rows_to_big_kernel", __FILE__, __LINE__);
  });
}

void add_bias(plexus::Context& ctx, const plexus::Tensor& bias, plexus::Tensor& out) {
  if (out.numel() == 0) return;
  const long long channels = out.dim(1), pixels = out.numel() / (out.dim(0) * channels);
  plexus::dispatch_float(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    add_bias_kernel<T><<<plexus::cuda::blocks_for(out.numel(), kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
        bias.data<T>(), out.data<T>(), out.numel(), channels, pixels);
    plexus::cuda::check_launch("add_bias_kernel", __FILE__, __LINE__);
  });
}

}  // namespace sparse_conv::cuda

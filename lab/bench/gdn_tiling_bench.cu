// gdn-tiling-bench: A/B timings of the tensor-core GDN kernels
// (layers/gdn/gdn_tensor_core.cu) with their TF32 and BF16 products and under
// other warp tilings than the ones the layer uses, at one shape (default 16x128x128x128, C = 128), one JSON line
// per variant on stdout, after two byte-floor rows (a streaming kernel that
// reads and writes the bytes of each pass and nothing else):
//   gdn-tiling-bench [--batch N] [--size S] [--repeats R]
// It includes the kernel file itself so that its kernels can be instantiated
// with the tilings below without the layer exporting them. Timing: CUDA
// events around the kernel alone (no parameter-gradient finishing step, no
// allocation), 5 untimed launches, then the median of `repeats`. Inputs are
// fixed pseudo-random values; the numbers are what the layer computes, only
// the work split differs, so the variants are checked against each other
// (max relative difference of dx and of the dgamma partial sums over blocks,
// against the first TF32 row: BF16 rows differ by their rounding, ~1e-2).
#include "gdn/gdn_tensor_core.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace gc = plexus::layers::gdn_cuda;
using plexus::cuda::check_cuda;

namespace {

// x, dy in [-1, 1) from a hash of the index (fixed across runs).
__global__ void fill_hashed(float* values, long long count, unsigned salt) {
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(e) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    values[e] = static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f;
  }
}

// The byte floor as a kernel: out = a + b (b may be null), float4 per thread,
// grid-stride: what reading the pass's inputs and writing its output costs.
__global__ void add_streams(const float4* a, const float4* b, float4* out, long long count4) {
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < count4;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    float4 v = a[e];
    if (b) {
      const float4 w = b[e];
      v.x += w.x;
      v.y += w.y;
      v.z += w.z;
      v.w += w.w;
    }
    out[e] = v;
  }
}

struct Buffers {
  int channels;
  long long pixels, total_pixels, count;
  float *x, *dy, *dx, *y, *beta, *gamma, *partials;
};

template <typename Fn>
double median_ms(int repeats, Fn&& launch) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate", __FILE__, __LINE__);
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate", __FILE__, __LINE__);
  for (int i = 0; i < 5; ++i) launch();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    check_cuda(cudaEventRecord(start), "cudaEventRecord", __FILE__, __LINE__);
    launch();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord", __FILE__, __LINE__);
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize", __FILE__, __LINE__);
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", __FILE__, __LINE__);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// dgamma and dbeta summed over the blocks' partials, on the host.
std::vector<double> summed_partials(const Buffers& b, int blocks) {
  const long long sums = static_cast<long long>(b.channels) * b.channels + b.channels;
  std::vector<float> host(static_cast<std::size_t>(blocks * sums));
  check_cuda(cudaMemcpy(host.data(), b.partials, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy",
             __FILE__, __LINE__);
  std::vector<double> total(static_cast<std::size_t>(sums), 0.0);
  for (int block = 0; block < blocks; ++block)
    for (long long e = 0; e < sums; ++e) total[e] += host[block * sums + e];
  return total;
}

std::vector<float> copy_out(const float* device, long long count) {
  std::vector<float> host(static_cast<std::size_t>(count));
  check_cuda(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy",
             __FILE__, __LINE__);
  return host;
}

template <typename A, typename B>
double max_relative_difference(const std::vector<A>& a, const std::vector<B>& b) {
  double scale = 0.0, worst = 0.0;
  for (std::size_t e = 0; e < a.size(); ++e) scale = std::max(scale, std::fabs(static_cast<double>(a[e])));
  for (std::size_t e = 0; e < a.size(); ++e)
    worst = std::max(worst, std::fabs(static_cast<double>(a[e]) - static_cast<double>(b[e])));
  return scale > 0 ? worst / scale : worst;
}

const gc::Reparametrization<float> kReparametrization{0.0f, 0.0f, 0.0f};  // value = max(stored, 0)^2

template <class L, class Product = plexus::cuda::Tf32Product>
void time_backward(const Buffers& b, const char* variant, int repeats, std::vector<float>& reference_dx,
                   std::vector<double>& reference_sums) {
  const long long tiles = (b.total_pixels + L::tile - 1) / L::tile;
  const int blocks =
      gc::persistent_blocks<gc::gdn_tensor_core_backward<L, Product, false>>(L::threads, L::backward_bytes, tiles);
  if (blocks == 0) {
    std::printf("{\"pass\":\"backward\",\"variant\":\"%s\",\"error\":\"does not fit\"}\n", variant);
    return;
  }
  const bool vector_io = b.pixels % 4 == 0;
  auto launch = [&] {
    gc::gdn_tensor_core_backward<L, Product, false>
        <<<blocks, L::threads, L::backward_bytes>>>(b.x, b.dy, b.dx, b.beta, b.gamma, b.channels, b.pixels,
                                                    b.total_pixels, kReparametrization, vector_io, b.partials);
    plexus::cuda::check_launch("gdn_tensor_core_backward", __FILE__, __LINE__);
  };
  const double ms = median_ms(repeats, launch);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
  const std::vector<float> dx = copy_out(b.dx, b.count);
  const std::vector<double> sums = summed_partials(b, blocks);
  if (reference_dx.empty()) {
    reference_dx = dx;
    reference_sums = sums;
  }
  std::printf("{\"pass\":\"backward\",\"variant\":\"%s\",\"ms\":%.5f,\"blocks\":%d,\"threads\":%d,\"shared_bytes\":%zu,"
              "\"dx_vs_first\":%.3g,\"dgamma_dbeta_vs_first\":%.3g}\n",
              variant, ms, blocks, L::threads, L::backward_bytes, max_relative_difference(reference_dx, dx),
              max_relative_difference(reference_sums, sums));
  std::fflush(stdout);
}

template <class L, class Product = plexus::cuda::Tf32Product>
void time_forward(const Buffers& b, const char* variant, int repeats, std::vector<float>& reference_y) {
  const long long tiles = (b.total_pixels + L::tile - 1) / L::tile;
  const int blocks = gc::blocks_per_half(
      gc::resident_blocks<gc::gdn_tensor_core_normalize<L, Product, false, false>>(L::threads, L::normalize_bytes),
      L::halves, tiles);
  if (blocks == 0) {
    std::printf("{\"pass\":\"forward\",\"variant\":\"%s\",\"error\":\"does not fit\"}\n", variant);
    return;
  }
  const bool vector_io = b.pixels % 4 == 0;
  auto launch = [&] {
    gc::gdn_tensor_core_normalize<L, Product, false, false>
        <<<dim3(blocks, L::halves), L::threads, L::normalize_bytes>>>(b.x, nullptr, b.y, nullptr, b.beta, b.gamma,
                                                                      b.channels, b.pixels, b.total_pixels,
                                                                      kReparametrization, vector_io, nullptr);
    plexus::cuda::check_launch("gdn_tensor_core_normalize", __FILE__, __LINE__);
  };
  const double ms = median_ms(repeats, launch);
  const std::vector<float> y = copy_out(b.y, b.count);
  if (reference_y.empty()) reference_y = y;
  std::printf("{\"pass\":\"forward\",\"variant\":\"%s\",\"ms\":%.5f,\"blocks\":%d,\"threads\":%d,\"shared_bytes\":%zu,"
              "\"y_vs_first\":%.3g}\n",
              variant, ms, blocks, L::threads, L::normalize_bytes, max_relative_difference(reference_y, y));
  std::fflush(stdout);
}

int int_option(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kChannels = 128;
  const int batch = int_option(argc, argv, "--batch", 16);
  const int size = int_option(argc, argv, "--size", 128);
  const int repeats = int_option(argc, argv, "--repeats", 50);
  Buffers b{};
  b.channels = kChannels;
  b.pixels = static_cast<long long>(size) * size;
  b.total_pixels = batch * b.pixels;
  b.count = b.total_pixels * kChannels;
  const std::size_t bytes = static_cast<std::size_t>(b.count) * sizeof(float);
  for (float** tensor : {&b.x, &b.dy, &b.dx, &b.y})
    check_cuda(cudaMalloc(tensor, bytes), "cudaMalloc", __FILE__, __LINE__);
  check_cuda(cudaMalloc(&b.beta, kChannels * sizeof(float)), "cudaMalloc", __FILE__, __LINE__);
  check_cuda(cudaMalloc(&b.gamma, kChannels * kChannels * sizeof(float)), "cudaMalloc", __FILE__, __LINE__);
  // Enough partials for 4 blocks per SM.
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute", __FILE__,
             __LINE__);
  check_cuda(cudaMalloc(&b.partials, 4ull * sms * (kChannels * kChannels + kChannels) * sizeof(float)), "cudaMalloc",
             __FILE__, __LINE__);
  fill_hashed<<<1024, 256>>>(b.x, b.count, 0x1234567u);
  plexus::cuda::check_launch("fill_hashed", __FILE__, __LINE__);
  fill_hashed<<<1024, 256>>>(b.dy, b.count, 0x7654321u);
  plexus::cuda::check_launch("fill_hashed", __FILE__, __LINE__);
  // stored beta 1 (value 1), stored gamma 0.3 on the diagonal and about 0.1 off it.
  std::vector<float> beta(kChannels, 1.0f), gamma(kChannels * kChannels);
  for (int i = 0; i < kChannels; ++i)
    for (int j = 0; j < kChannels; ++j) gamma[i * kChannels + j] = i == j ? 0.3f : 0.05f + 0.001f * ((i * 7 + j) % 97);
  check_cuda(cudaMemcpy(b.beta, beta.data(), beta.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy",
             __FILE__, __LINE__);
  check_cuda(cudaMemcpy(b.gamma, gamma.data(), gamma.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy",
             __FILE__, __LINE__);

  std::printf("{\"shape\":[%d,%d,%d,%d],\"repeats\":%d}\n", batch, kChannels, size, size, repeats);
  // Byte floors: read x, write y (forward); read x and dy, write dx (backward).
  for (const bool backward : {false, true}) {
    const long long count4 = b.count / 4;
    const int sm_blocks = 4 * sms;  // 4 blocks of 512 threads per SM
    auto launch = [&] {
      add_streams<<<sm_blocks, 512>>>(reinterpret_cast<const float4*>(b.x),
                                      backward ? reinterpret_cast<const float4*>(b.dy) : nullptr,
                                      reinterpret_cast<float4*>(backward ? b.dx : b.y), count4);
      plexus::cuda::check_launch("add_streams", __FILE__, __LINE__);
    };
    const double ms = median_ms(repeats, launch);
    const double gigabytes = (backward ? 3.0 : 2.0) * static_cast<double>(b.count) * sizeof(float) / 1e9;
    std::printf("{\"pass\":\"%s\",\"variant\":\"byte floor: %s\",\"ms\":%.5f,\"TB_per_s\":%.3f}\n",
                backward ? "backward" : "forward", backward ? "dx = x + dy" : "y = x", ms, gigabytes / ms);
  }
  // Tiling<CP, rows, threads, tile, contraction warps M x N, dgamma warps M x N, min blocks, buffers, k unroll>
  using gc::Tiling;
  std::vector<float> reference_y;
  using plexus::cuda::Bf16Product;
  time_forward<gc::ForwardTiling<128>>(b, "layer's tiling", repeats, reference_y);
  time_forward<gc::ForwardTiling<128>, Bf16Product>(b, "layer's tiling, BF16 product", repeats, reference_y);
  time_forward<Tiling<128, 128, 256, 64, 4, 2, 4, 2, 2, 1, 4>, Bf16Product>(b, "BF16 product, unroll 4 (2 k steps)",
                                                                            repeats, reference_y);
  time_forward<Tiling<128, 128, 256, 64, 4, 2, 4, 2, 2, 1, 2>>(b, "8 warps 32x32, 2 blocks/SM, unroll 2 (before)",
                                                               repeats, reference_y);
  time_forward<Tiling<128, 128, 256, 64, 4, 2, 4, 2, 2, 1, 4>>(b, "8 warps 32x32, 2 blocks/SM, unroll 4", repeats,
                                                               reference_y);
  time_forward<Tiling<128, 128, 128, 64, 2, 2, 2, 2, 2, 1, 16>>(b, "4 warps 64x32, 2 blocks/SM, unroll 16", repeats,
                                                                reference_y);

  std::vector<float> reference_dx;
  std::vector<double> reference_sums;
  time_backward<gc::BackwardTiling<128>>(b, "layer's tiling", repeats, reference_dx, reference_sums);
  time_backward<gc::BackwardTiling<128>, Bf16Product>(b, "layer's tiling, BF16 product", repeats, reference_dx,
                                                      reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 16>, Bf16Product>(
      b, "BF16 product, unroll 16 (8 k steps: full)", repeats, reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 4>, Bf16Product>(b, "BF16 product, unroll 4 (2 k steps)",
                                                                             repeats, reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 512, 64, 4, 4, 4, 4, 1, 2, 2>>(b, "16 warps, 32x16 / dgamma 32x32, unroll 2 (before)",
                                                                repeats, reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 2>>(b, "8 warps, 32x32 / dgamma 64x32, unroll 2", repeats,
                                                                reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 4>>(b, "8 warps, 32x32 / dgamma 64x32, unroll 4", repeats,
                                                                reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 16>>(b, "8 warps, 32x32 / dgamma 64x32, unroll 16", repeats,
                                                                 reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 4, 2, 1, 2, 8>>(b, "8 warps, 32x32 / dgamma 32x64, unroll 8", repeats,
                                                                reference_dx, reference_sums);
  time_backward<Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 1, 8>>(
      b, "8 warps, 32x32 / dgamma 64x32, one buffer, unroll 8", repeats, reference_dx, reference_sums);
  return 0;
}

// Pieces shared by the CUDA kernels of GDN / IGDN: the FP32/f64 kernels in
// gdn.cu and the tensor-core kernels in gdn_tensor_core.cu (math and
// notation in gdn.h). Include from those two .cu files only.
#pragma once
#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/scratch.h"
#include "gdn/gdn.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers::gdn_cuda {

template <typename T>
struct Reparametrization {
  T pedestal;
  T beta_bound;
  T gamma_bound;
};

// value = max(stored, bound)^2 - pedestal
template <typename T>
__device__ __forceinline__ T effective_value(T stored, T bound, T pedestal) {
  T clipped = stored > bound ? stored : bound;
  return clipped * clipped - pedestal;
}

__device__ __forceinline__ float reciprocal_sqrt(float v) { return rsqrtf(v); }
__device__ __forceinline__ double reciprocal_sqrt(double v) { return rsqrt(v); }

// ---- vector access to N = 4 or 2 consecutive elements, aligned to N elements ----
__device__ __forceinline__ void load4(const float* source, float* out) {
  float4 v = *reinterpret_cast<const float4*>(source);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
__device__ __forceinline__ void load4(const double* source, double* out) {
  double2 a = *reinterpret_cast<const double2*>(source);
  double2 b = *reinterpret_cast<const double2*>(source + 2);
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}
__device__ __forceinline__ void load2(const float* source, float* out) {
  float2 v = *reinterpret_cast<const float2*>(source);
  out[0] = v.x;
  out[1] = v.y;
}
__device__ __forceinline__ void load2(const double* source, double* out) {
  double2 v = *reinterpret_cast<const double2*>(source);
  out[0] = v.x;
  out[1] = v.y;
}
__device__ __forceinline__ void store4(float* destination, const float* in) {
  *reinterpret_cast<float4*>(destination) = make_float4(in[0], in[1], in[2], in[3]);
}
__device__ __forceinline__ void store4(double* destination, const double* in) {
  *reinterpret_cast<double2*>(destination) = make_double2(in[0], in[1]);
  *reinterpret_cast<double2*>(destination + 2) = make_double2(in[2], in[3]);
}
__device__ __forceinline__ void store2(float* destination, const float* in) {
  *reinterpret_cast<float2*>(destination) = make_float2(in[0], in[1]);
}
__device__ __forceinline__ void store2(double* destination, const double* in) {
  *reinterpret_cast<double2*>(destination) = make_double2(in[0], in[1]);
}

// bf16 storage (the tensor-core kernels' Element = __nv_bfloat16): 4 or 2
// consecutive bf16 values, 8 or 4 bytes, either kept as they are (held in
// registers until stored to shared memory) or widened to f32 (exact); f32
// values stored to bf16 round to nearest even.
__device__ __forceinline__ void load4(const __nv_bfloat16* source, __nv_bfloat16* out) {
  *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(source);
}
__device__ __forceinline__ void load4(const __nv_bfloat16* source, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(source);
  const float2 low = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 high = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  out[0] = low.x;
  out[1] = low.y;
  out[2] = high.x;
  out[3] = high.y;
}
__device__ __forceinline__ void load2(const __nv_bfloat16* source, float* out) {
  const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(source));
  out[0] = v.x;
  out[1] = v.y;
}
__device__ __forceinline__ void store2(__nv_bfloat16* destination, const float* in) {
  *reinterpret_cast<__nv_bfloat162*>(destination) = __floats2bfloat162_rn(in[0], in[1]);
}

// One element of storage type E as the value type T, and back (the same
// type: as is; bf16: widened exactly, or rounded to nearest even, by
// activation_elements.cuh).
template <typename T, typename E>
__device__ __forceinline__ T element_value(E value) {
  if constexpr (std::is_same_v<E, __nv_bfloat16> && !std::is_same_v<T, __nv_bfloat16>)
    return static_cast<T>(load_f32(&value));
  else return value;
}
template <typename E, typename T>
__device__ __forceinline__ E stored_value(T value) {
  if constexpr (std::is_same_v<E, __nv_bfloat16> && !std::is_same_v<T, __nv_bfloat16>) {
    E stored;
    store_f32(&stored, static_cast<float>(value));
    return stored;
  } else {
    return value;
  }
}

// N consecutive pixels (first, first + 1, ...) of the whole batch: element
// (channel i, pixel c) lies at offset[c] + i * pixels. `contiguous`: all N in
// bounds, in one image and aligned to N elements, so one vector access serves
// them (with pixels % 4 == 0, 16-byte aligned tensors and first % N == 0 the
// N pixels never straddle two images).
template <int N>
struct PixelRun {
  long long offset[N];
  int valid_mask;
  bool contiguous;
};

template <int N>
__device__ __forceinline__ PixelRun<N> pixel_run(long long first, long long total_pixels, long long pixels,
                                                 int channels, bool vector_io) {
  PixelRun<N> run;
  run.valid_mask = 0;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    long long g = first + c;
    run.offset[c] = 0;
    if (g < total_pixels) {
      run.offset[c] = (g / pixels) * channels * pixels + g % pixels;
      run.valid_mask |= 1 << c;
    }
  }
  run.contiguous = vector_io && run.valid_mask == (1 << N) - 1;
  return run;
}

// The run's N values of one channel (0 outside the batch), from storage of
// element type E into values of type T (element_value).
template <int N, typename E, typename T>
__device__ __forceinline__ void load_run(const E* base, const PixelRun<N>& run, long long channel_offset, T* out) {
  if (run.contiguous) {
    if constexpr (N == 4) load4(base + run.offset[0] + channel_offset, out);
    else load2(base + run.offset[0] + channel_offset, out);
  } else {
#pragma unroll
    for (int c = 0; c < N; ++c)
      out[c] = (run.valid_mask >> c) & 1 ? element_value<T>(base[run.offset[c] + channel_offset]) : T(0.0f);
  }
}

template <int N, typename E, typename T>
__device__ __forceinline__ void store_run(E* base, const PixelRun<N>& run, long long channel_offset, const T* in) {
  if (run.contiguous) {
    if constexpr (N == 4) store4(base + run.offset[0] + channel_offset, in);
    else store2(base + run.offset[0] + channel_offset, in);
  } else {
#pragma unroll
    for (int c = 0; c < N; ++c)
      if ((run.valid_mask >> c) & 1) base[run.offset[c] + channel_offset] = stored_value<E>(in[c]);
  }
}

// q = dL/dn and the output-gradient factor from n, x and dy (one element):
//   GDN  q = -1/2 dy x n^-3/2, f = n^-1/2     IGDN q = 1/2 dy x n^-1/2, f = n^1/2
// returns q; dy becomes dy f.
template <bool kInverse>
__device__ __forceinline__ float norm_gradient(float n, float x, float& dy) {
  const float root = rsqrtf(n);  // n^-1/2
  float q;
  if (kInverse) {
    q = 0.5f * dy * x * root;
    dy = dy * sqrtf(n);
  } else {
    q = -0.5f * dy * x * root * root * root;
    dy = dy * root;
  }
  return q;
}

// The block's dbeta into its partial [C*C + C] (at C*C + row_begin + r):
// beta_grad holds, per thread, the sums of rows m_base + 16 mt + g + 8 half
// (g = lane/4) over its pixels. Summed over the 4 lanes of a row, then over
// the kWarpsN warps sharing rows (warp % kWarpsN) in a fixed order, through
// `scratch` (shared memory no longer read, at least kWarpsN x kRows floats).
template <int kMTiles, int kWarpsN, int kRows, int kThreads>
__device__ void write_beta_partial(const float (&beta_grad)[kMTiles][2], int m_base, int row_begin, int channels,
                                   float* scratch, float* partial) {
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  __syncthreads();  // every warp is done with the scratch memory
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = beta_grad[mt][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (t == 0) scratch[(warp % kWarpsN) * kRows + m_base + 16 * mt + g + 8 * half] = sum;
    }
  __syncthreads();
  for (int r = threadIdx.x; r < kRows && row_begin + r < channels; r += kThreads) {
    float sum = 0.0f;
    for (int w = 0; w < kWarpsN; ++w) sum += scratch[w * kRows + r];
    partial[channels * channels + row_begin + r] = sum;
  }
}

// A warp's dgamma accumulators (mma layout: rows row0 + 16 mt + g + 8 (e/2),
// columns column0 + 8 nt + 2t + e%2) into the partial's dgamma [C x C],
// inside the C channels.
template <int kMTiles, int kNTiles>
__device__ void write_gamma_partial(const float (&gamma_grad)[kMTiles][kNTiles][4], int row0, int column0, int channels,
                                    float* partial) {
  const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row0 + 16 * mt + g + 8 * (e / 2);
        const int k = column0 + 8 * nt + 2 * t + e % 2;
        if (i < channels && k < channels) partial[i * channels + k] = gamma_grad[mt][nt][e];
      }
}

// ---------------------------------------------------------------- host side

struct Problem {
  int channels;
  long long pixels;        // per image: product of the axes after the channels
  long long total_pixels;  // images * pixels
  long long count;         // elements
};

inline Problem problem_of(const Tensor& x) {
  Problem problem;
  problem.channels = static_cast<int>(x.dim(1));
  problem.pixels = 1;
  for (int axis = 2; axis < x.ndim(); ++axis) problem.pixels *= x.dim(axis);
  problem.total_pixels = x.dim(0) * problem.pixels;
  problem.count = x.numel();
  return problem;
}

inline bool aligned16(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0; }

// A tensor's elements as a kernel's element type (float, or __nv_bfloat16 for a bf16 tensor).
template <class Element>
const Element* elements(const Tensor& tensor) {
  return static_cast<const Element*>(tensor.raw_data());
}
template <class Element>
Element* elements(Tensor& tensor) {
  return static_cast<Element*>(tensor.raw_data());
}

// The fused backward kernels' per-block partial sums [blocks, C*C + C]
// (dgamma row-major, then dbeta) in `cache`, reallocated only when their
// shape changes.
inline Tensor& partials_for(Tensor& cache, int blocks, const Problem& problem, Device device) {
  const long long sums = static_cast<long long>(problem.channels) * problem.channels + problem.channels;
  return scratch_tensor(cache, {static_cast<std::int64_t>(blocks), static_cast<std::int64_t>(sums)}, DType::f32,
                        device);
}

// How many blocks of `threads` threads of the fused kernel `kKernel` fit on
// the current GPU at once (0 when its shared memory does not fit there at
// all). Queried once per kernel and device (the template argument keeps one
// cache per kernel: the kernels' types alone do not tell them apart); the
// query also raises the kernel's dynamic shared memory limit, which a launch
// needs.
template <auto kKernel>
int resident_blocks(int threads, std::size_t shared_bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // blocks + 1; 0: not yet known
  int device = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  if (device < kMaxDevices) {
    const int known = cached[device].load();
    if (known > 0) return known - 1;
  }
  int max_shared = 0, sms = 0, per_sm = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                   "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)", __FILE__, __LINE__);
  cuda::check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                   "cudaDeviceGetAttribute(MultiProcessorCount)", __FILE__, __LINE__);
  if (shared_bytes <= static_cast<std::size_t>(max_shared)) {
    cuda::check_cuda(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
    cuda::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, shared_bytes),
                     "cudaOccupancyMaxActiveBlocksPerMultiprocessor", __FILE__, __LINE__);
  }
  const int blocks = per_sm * sms;
  if (device < kMaxDevices) cached[device].store(blocks + 1);
  return blocks;
}

// Blocks for a persistent fused kernel: as many as are resident at once, at
// most one per tile; 0 when the kernel cannot run on this GPU.
template <auto kKernel>
int persistent_blocks(int threads, std::size_t shared_bytes, long long tiles) {
  const long long blocks = resident_blocks<kKernel>(threads, shared_bytes);
  return static_cast<int>(blocks < tiles ? blocks : tiles);
}

// Tensor-core kernels (gdn_tensor_core.cu), C <= 256, compute capability
// >= 8.0: TF32 products, BF16 when ctx.bf16_products() (unless
// PLEXUS_GDN_BF16=0, to compare). f32 tensors; with BF16 products and
// C <= 192 also bf16 ones: x and dx in one dtype, y and dy in one dtype,
// each f32 or bf16. Otherwise they return as below, having launched nothing.
// y = GDN(x) (IGDN when `inverse`); false when it cannot run here (then nothing was launched).
bool tensor_core_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& stored_beta,
                         const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp, bool inverse);
// dx (when not null) and per-block partial sums [blocks, C*C + C] of
// dL/dgamma (row-major) then dL/dbeta, with respect to the effective values,
// written into `partials_cache` (reallocated only when its shape changes) and
// returned; an undefined tensor when it cannot run here (then nothing was launched).
Tensor tensor_core_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& stored_beta,
                            const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp,
                            bool inverse, Tensor& partials_cache);

// The tensor-core kernels on bf16 tiles (gdn_bf16_tiles.cu), called by the
// two above first: x, y (dy, dx) all bf16, BF16 products, C <= 192, pixels
// per image a multiple of 8, 16-byte aligned tensors, unless
// PLEXUS_GDN_BF16_TILES=0. Same results as the two above up to the order of
// f32 sums; false / an undefined tensor when they do not take the call.
bool bf16_tile_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& stored_beta, const Tensor& stored_gamma,
                       const Problem& problem, Reparametrization<float> rp, bool inverse);
Tensor bf16_tile_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& stored_beta,
                          const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp, bool inverse,
                          Tensor& partials_cache);

}  // namespace plexus::layers::gdn_cuda

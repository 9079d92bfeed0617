// The implicit-GEMM engine's forward and backward_data on Hopper: the gather
// GEMM of implicit_gemm_gather.cu (same parts, tap table, K splits, bias and
// reduce_splits) with its products on wgmma, the warpgroup MMA that reads
// both operands from shared memory (sm_90a). Tap-major K only: A = the packed
// weight [m][k], B = source pixels of the NHWC copy [pixel][channel], both
// K-contiguous, which is what TF32 wgmma requires.
//
// This file is compiled for sm_90a alone (layers/CMakeLists.txt) when the
// build's architectures include Hopper; otherwise the kernel body is empty
// and uses_wgmma() is false.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "convolution/implicit_gemm_gather.cuh"
#include "convolution/wgmma.cuh"

namespace plexus::layers::implicit_gemm {

namespace detail {

namespace {

// Each stage holds, for A and for B, one 128-row tile in wgmma's 128-byte
// swizzled K-major layout (wgmma.cuh). The swizzle also makes the 8 threads
// that copy a row's 8 chunks hit distinct banks.
constexpr int kRowBytes = kWgmmaRowBytes;
constexpr int kTileRows = kWgmmaTileRows;
constexpr int kTileBytes = kWgmmaTileBytes;  // 16 KiB: one operand of one stage
// The ring's depth and how many stages of wgmmas stay in flight when the
// next is issued (0: each stage waits for its own; 1: for the previous one,
// and the loads run one stage less ahead so they never refill a slot it reads).
constexpr int kStages = 3;
constexpr int kWgmmaInFlight = 0;
constexpr int kSwizzleAlign = kWgmmaSwizzleAlign;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ inline unsigned swizzled_chunk(int row, int chunk) {
  return static_cast<unsigned>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

#endif

// wgmma_gather_kernel: as gather_gemm_kernel (tap-major), Element = float
// (TF32 products) or std::uint16_t (bf16 bit patterns, BF16 products).
// Two blocks per multiprocessor fit with 3 stages (3 x 32 KiB), one with 4.
// grid = (N tiles of the largest part x parts, M tiles, K splits); 256
// threads = two warpgroups, warpgroup w multiplies rows 64w..64w+63 of A by
// all of B; every thread also issues the stage's cp.async copies.
template <class Element>
__global__ void __launch_bounds__(kThreads, 2) wgmma_gather_kernel(const GatherParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kTileK = kRowBytes / sizeof(Element), kChunkElements = 16 / sizeof(Element);
  using T = WgmmaGatherTile<kTileK, kStages>;
  static_assert(T::MT == 1 && T::NT == 16 && T::BM == kTileRows && T::BN == kTileRows && T::STAGES == kStages,
                "two warpgroups of m64n128 over one ring of 128-row tiles");
  const GatherBlock block = gather_block<T::BM, T::BN, T::BK>(params);
  if (block.n0 >= block.n_size) return;  // the whole block: this part has fewer tiles than the largest
  const GatherPart& part = *block.part;
  const int tid = threadIdx.x;
  const Element* source = static_cast<const Element*>(params.source);

  // Rings at a 1024-byte aligned start (the launch asks for kSwizzleAlign extra bytes).
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const unsigned shared_base = shared_address(shared_bytes);
  const unsigned skip = (kSwizzleAlign - (shared_base & (kSwizzleAlign - 1))) & (kSwizzleAlign - 1);
  unsigned char* rings = shared_bytes + skip;
  const unsigned a_ring = shared_base + skip;             // kStages x [128 rows][128 bytes]
  const unsigned b_ring = a_ring + kStages * kTileBytes;  // kStages x [128 pixels][128 bytes]
  int2* taps = reinterpret_cast<int2*>(rings + 2 * kStages * kTileBytes);
  write_tap_major_table(params, part, taps);

  // Copies: thread tid moves 16-byte chunk tid % 8 of rows tid / 8 + 32 r
  // (r < 4) of both tiles; a row's 8 chunks come from 8 neighbouring threads.
  constexpr int kChunks = kRowBytes / 16, kRowStep = kThreads / kChunks, kRowsPerThread = kTileRows / kRowStep;
  const int chunk = tid % kChunks, first_row = tid / kChunks;
  const int source_plane = params.source_h * params.source_w;
  int b_base[kRowsPerThread], row0[kRowsPerThread], col0[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const GatherPixel pixel = gather_pixel(params, block, block.n0 + first_row + r * kRowStep);
    row0[r] = pixel.row0;
    col0[r] = pixel.col0;
    b_base[r] = pixel.image * source_plane + (pixel.valid ? pixel.row0 * params.source_w + pixel.col0 : 0);
  }
  const Element* a_rows = static_cast<const Element*>(params.a) + part.a_offset +
                          static_cast<long long>(block.m0) * part.k_stride + chunk * kChunkElements;

  auto load_stage = [&](int stage, int k_tile) {
    const Element* a_columns = a_rows + static_cast<long long>(k_tile) * kTileK;
    unsigned char* a_tile = rings + stage * kTileBytes;
    unsigned char* b_tile = rings + (kStages + stage) * kTileBytes;
    // B: stage k_tile is channels [c0, c0 + kTileK) of one tap (zeros past the real channels).
    const int tiles_per_tap = params.channel_pad / kTileK;
    const int tap = k_tile / tiles_per_tap;
    const int c0 = (k_tile - tap * tiles_per_tap) * kTileK;
    const int2 entry = taps[tap];
    const int di = entry.y >> 16, dj = static_cast<short>(entry.y & 0xffff);
    const Element* b_channels = source + c0 + chunk * kChunkElements;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int row = first_row + r * kRowStep;
      copy16_async(reinterpret_cast<float*>(a_tile + swizzled_chunk(row, chunk)),
                   reinterpret_cast<const float*>(a_columns + static_cast<long long>(row) * part.k_stride));
      const bool inside = static_cast<unsigned>(row0[r] + di) < static_cast<unsigned>(params.source_h) &&
                          static_cast<unsigned>(col0[r] + dj) < static_cast<unsigned>(params.source_w);
      const long long offset = static_cast<long long>(b_base[r] + entry.x) * params.channel_pad;
      copy16_async_zfill(reinterpret_cast<float*>(b_tile + swizzled_chunk(row, chunk)),
                         reinterpret_cast<const float*>(inside ? b_channels + offset : source), inside);
    }
  };

  const int warp = tid / 32, lane = tid % 32, warpgroup = warp / 4;
  __syncthreads();  // the tap table is complete
  float acc[1][16][4];
  run_k_pipeline<T, kStages - 1 - kWgmmaInFlight>(
      block.k_tiles, acc, [&](int stage, int k_tile) { load_stage(stage, block.k_first + k_tile); },
      [&](int stage, float(&sums)[1][16][4]) {
        // Four wgmmas of 32 bytes of K each, then wait for all but
        // kWgmmaInFlight stages of them: a slot is refilled only after a
        // later barrier, once every wgmma reading it has completed.
        const std::uint64_t a = swizzled_descriptor(a_ring + stage * kTileBytes + warpgroup * (kTileBytes / 2));
        const std::uint64_t b = swizzled_descriptor(b_ring + stage * kTileBytes);
        fence_accumulators(sums[0]);
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < kRowBytes / 32; ++step) {
          if constexpr (sizeof(Element) == 4) wgmma_tf32(sums[0], a + 2 * step, b + 2 * step);
          else wgmma_bf16(sums[0], a + 2 * step, b + 2 * step);
        }
        wgmma_commit();
        wgmma_wait<kWgmmaInFlight>();
        fence_accumulators(sums[0]);
      },
      // cp.async writes shared memory through the generic proxy, wgmma reads it
      // through the async proxy: each thread fences its landed copies before the barrier.
      [] {
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      });
  wgmma_wait<0>();
  fence_accumulators(acc[0]);
  static_assert(staging_bytes<T>() <= 2 * kStages * kTileBytes, "the C tile is staged in the operand rings");
  store_gather_tile<T>(params, block, 16 * warp, 0, lane, acc, reinterpret_cast<float*>(rings));
#endif
}

// Dynamic shared memory: two rings and the tap table, plus the alignment slack.
std::size_t wgmma_shared_bytes(int table_entries) {
  return kSwizzleAlign + 2 * kStages * kTileBytes + sizeof(int2) * static_cast<std::size_t>(table_entries);
}

template <class Element>
void launch(const Context& ctx, const GatherParams& params, dim3 grid, int table_entries) {
  static const bool opted_in = (allow_shared_bytes(wgmma_gather_kernel<Element>, wgmma_shared_bytes(kMaxTaps),
                                                   "cudaFuncSetAttribute(wgmma_gather_kernel)"),
                                true);
  (void)opted_in;
  wgmma_gather_kernel<Element><<<grid, kThreads, wgmma_shared_bytes(table_entries), cuda::stream(ctx)>>>(params);
  cuda::check_launch("wgmma_gather_kernel", __FILE__, __LINE__);
}

}  // namespace

void launch_wgmma_gather(const Context& ctx, const GatherParams& params, dim3 grid, int table_entries, bool bf16) {
  if (bf16) launch<std::uint16_t>(ctx, params, grid, table_entries);
  else launch<float>(ctx, params, grid, table_entries);
}

}  // namespace detail

bool uses_wgmma(const Context& ctx) {
#if defined(PLEXUS_CONV_WGMMA)
  // Whether the device is a Hopper (9.0), asked once per process and device: 0 unknown, 1 no, 2 yes.
  constexpr int kDevices = 64;
  static std::atomic<int> decided[kDevices];
  const int device = cuda::resources(ctx).device;
  if (!ctx.kernel_settings().conv_wgmma) return false;
  if (device >= 0 && device < kDevices && decided[device].load() != 0) return decided[device].load() == 2;
  int major = 0, minor = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                   "cudaDeviceGetAttribute(compute capability)", __FILE__, __LINE__);
  cuda::check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                   "cudaDeviceGetAttribute(compute capability)", __FILE__, __LINE__);
  const bool wgmma = major == 9 && minor == 0;
  if (device >= 0 && device < kDevices) decided[device].store(wgmma ? 2 : 1);
  return wgmma;
#else
  (void)ctx;
  return false;
#endif
}

}  // namespace plexus::layers::implicit_gemm

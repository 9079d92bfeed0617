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
#include <cstring>

#include "conv2d/implicit_gemm_gather.cuh"

namespace plexus::layers::implicit_gemm {

namespace detail {

namespace {

// Each stage holds, for A and for B, 128 rows of one 128-byte row of K (32
// f32 or 64 bf16) in wgmma's 128-byte swizzled K-major layout: row r at byte
// 128 r, its 16-byte chunk j stored at chunk j ^ (r % 8) (the hardware
// swizzles on address bits, so every tile starts 1024-byte aligned), 8-row
// groups 1024 bytes apart. The swizzle also makes the 8 threads that copy a
// row's 8 chunks hit distinct banks.
constexpr int kRowBytes = 128;
constexpr int kTileRows = 128;
constexpr int kTileBytes = kTileRows * kRowBytes;  // 16 KiB: one operand of one stage
// The ring's depth and how many stages of wgmmas stay in flight when the
// next is issued (0: each stage waits for its own; 1: for the previous one,
// and the loads run one stage less ahead so they never refill a slot it reads).
constexpr int kStages = 3;
constexpr int kWgmmaInFlight = 0;
constexpr int kSwizzleAlign = 1024;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ inline unsigned swizzled_chunk(int row, int chunk) {
  return static_cast<unsigned>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// wgmma shared-memory matrix descriptor of a K-major tile with 128-byte
// swizzle: start address >> 4 (bits 0-13), leading byte offset >> 4 (bits
// 16-29; unused by swizzled K-major layouts, 1 by convention), stride byte
// offset >> 4 (bits 32-45: 1024, one 8-row group), base offset 0 (bits 49-51:
// tiles are 1024-byte aligned), swizzle mode 1 = 128 bytes (bits 62-63). The
// k-th 32 bytes of the rows (one k8 TF32 / k16 BF16 step) start 2k units later.
__device__ inline std::uint64_t swizzled_descriptor(unsigned shared_byte_address) {
  return static_cast<std::uint64_t>((shared_byte_address & 0x3ffff) >> 4) | (std::uint64_t{1} << 16) |
         (static_cast<std::uint64_t>(kSwizzleAlign >> 4) << 32) | (std::uint64_t{1} << 62);
}

// d[64 x 128] += a[64 x 8] b[8 x 128] (TF32, K-major a and b from shared memory, f32 accumulators).
__device__ inline void wgmma_tf32(float (&d)[1][16][4], std::uint64_t a, std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]),
        "+f"(d[0][1][0]), "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]),
        "+f"(d[0][2][0]), "+f"(d[0][2][1]), "+f"(d[0][2][2]), "+f"(d[0][2][3]),
        "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), "+f"(d[0][3][3]),
        "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]),
        "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]),
        "+f"(d[0][6][0]), "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]),
        "+f"(d[0][7][0]), "+f"(d[0][7][1]), "+f"(d[0][7][2]), "+f"(d[0][7][3]),
        "+f"(d[0][8][0]), "+f"(d[0][8][1]), "+f"(d[0][8][2]), "+f"(d[0][8][3]),
        "+f"(d[0][9][0]), "+f"(d[0][9][1]), "+f"(d[0][9][2]), "+f"(d[0][9][3]),
        "+f"(d[0][10][0]), "+f"(d[0][10][1]), "+f"(d[0][10][2]), "+f"(d[0][10][3]),
        "+f"(d[0][11][0]), "+f"(d[0][11][1]), "+f"(d[0][11][2]), "+f"(d[0][11][3]),
        "+f"(d[0][12][0]), "+f"(d[0][12][1]), "+f"(d[0][12][2]), "+f"(d[0][12][3]),
        "+f"(d[0][13][0]), "+f"(d[0][13][1]), "+f"(d[0][13][2]), "+f"(d[0][13][3]),
        "+f"(d[0][14][0]), "+f"(d[0][14][1]), "+f"(d[0][14][2]), "+f"(d[0][14][3]),
        "+f"(d[0][15][0]), "+f"(d[0][15][1]), "+f"(d[0][15][2]), "+f"(d[0][15][3])
      : "l"(a), "l"(b));
}

// d[64 x 128] += a[64 x 16] b[16 x 128] (BF16, K-major, no transposes, f32 accumulators).
__device__ inline void wgmma_bf16(float (&d)[1][16][4], std::uint64_t a, std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]),
        "+f"(d[0][1][0]), "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]),
        "+f"(d[0][2][0]), "+f"(d[0][2][1]), "+f"(d[0][2][2]), "+f"(d[0][2][3]),
        "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), "+f"(d[0][3][3]),
        "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]),
        "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]),
        "+f"(d[0][6][0]), "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]),
        "+f"(d[0][7][0]), "+f"(d[0][7][1]), "+f"(d[0][7][2]), "+f"(d[0][7][3]),
        "+f"(d[0][8][0]), "+f"(d[0][8][1]), "+f"(d[0][8][2]), "+f"(d[0][8][3]),
        "+f"(d[0][9][0]), "+f"(d[0][9][1]), "+f"(d[0][9][2]), "+f"(d[0][9][3]),
        "+f"(d[0][10][0]), "+f"(d[0][10][1]), "+f"(d[0][10][2]), "+f"(d[0][10][3]),
        "+f"(d[0][11][0]), "+f"(d[0][11][1]), "+f"(d[0][11][2]), "+f"(d[0][11][3]),
        "+f"(d[0][12][0]), "+f"(d[0][12][1]), "+f"(d[0][12][2]), "+f"(d[0][12][3]),
        "+f"(d[0][13][0]), "+f"(d[0][13][1]), "+f"(d[0][13][2]), "+f"(d[0][13][3]),
        "+f"(d[0][14][0]), "+f"(d[0][14][1]), "+f"(d[0][14][2]), "+f"(d[0][14][3]),
        "+f"(d[0][15][0]), "+f"(d[0][15][1]), "+f"(d[0][15][2]), "+f"(d[0][15][3])
      : "l"(a), "l"(b));
}

// Keeps the compiler from moving accesses of the accumulators across the
// wgmma fence / wait (wgmma writes them asynchronously).
__device__ inline void fence_accumulators(float (&d)[1][16][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[0][j][e])::"memory");
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
  const unsigned a_ring = shared_base + skip;                // kStages x [128 rows][128 bytes]
  const unsigned b_ring = a_ring + kStages * kTileBytes;     // kStages x [128 pixels][128 bytes]
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
        fence_accumulators(sums);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int step = 0; step < kRowBytes / 32; ++step) {
          if constexpr (sizeof(Element) == 4)
            wgmma_tf32(sums, a + 2 * step, b + 2 * step);
          else
            wgmma_bf16(sums, a + 2 * step, b + 2 * step);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kWgmmaInFlight) : "memory");
        fence_accumulators(sums);
      },
      // cp.async writes shared memory through the generic proxy, wgmma reads it
      // through the async proxy: each thread fences its landed copies before the barrier.
      [] { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); });
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_accumulators(acc);
  store_gather_tile<T>(params, block, 16 * warp, 0, lane, acc);
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
  wgmma_gather_kernel<Element>
      <<<grid, kThreads, wgmma_shared_bytes(table_entries), cuda::stream(ctx)>>>(params);
  cuda::check_launch("wgmma_gather_kernel", __FILE__, __LINE__);
}

}  // namespace

void launch_wgmma_gather(const Context& ctx, const GatherParams& params, dim3 grid, int table_entries, bool bf16) {
  if (bf16)
    launch<std::uint16_t>(ctx, params, grid, table_entries);
  else
    launch<float>(ctx, params, grid, table_entries);
}

}  // namespace detail

bool uses_wgmma(const Context& ctx) {
#if defined(PLEXUS_CONV_WGMMA)
  // Decided once per process and device: 0 unknown, 1 no, 2 yes.
  constexpr int kDevices = 64;
  static std::atomic<int> decided[kDevices];
  const int device = cuda::resources(ctx).device;
  if (device >= 0 && device < kDevices && decided[device].load() != 0) return decided[device].load() == 2;
  const char* setting = std::getenv("PLEXUS_CONV_WGMMA");
  int major = 0, minor = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                   "cudaDeviceGetAttribute(compute capability)", __FILE__, __LINE__);
  cuda::check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                   "cudaDeviceGetAttribute(compute capability)", __FILE__, __LINE__);
  const bool wgmma = major == 9 && minor == 0 && !(setting && std::strcmp(setting, "0") == 0);
  if (device >= 0 && device < kDevices) decided[device].store(wgmma ? 2 : 1);
  return wgmma;
#else
  (void)ctx;
  return false;
#endif
}

}  // namespace plexus::layers::implicit_gemm

#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a) pieces shared by the engine's wgmma
// kernels (implicit_gemm_wgmma.cu, implicit_gemm_wgmma_weight_grad.cu).
// Their operand tiles are 128 rows of one 128-byte row of K (32 f32 or 64
// bf16) in wgmma's 128-byte swizzled K-major layout: row r at byte 128 r, its
// 16-byte chunk j stored at chunk j ^ (r % 8) (the hardware swizzles on
// address bits, so every tile starts 1024-byte aligned), 8-row groups 1024
// bytes apart. The TMA's 128-byte swizzle writes the same layout.
#include <cstdint>

namespace plexus::layers::implicit_gemm::detail {

constexpr int kWgmmaRowBytes = 128;
constexpr int kWgmmaTileRows = 128;
constexpr int kWgmmaTileBytes = kWgmmaTileRows * kWgmmaRowBytes;  // 16 KiB: one operand of one stage
constexpr int kWgmmaSwizzleAlign = 1024;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma shared-memory matrix descriptor of a K-major tile of kRowBytes-byte
// rows swizzled over as many bytes (128, 64 or 32), as the TMA's swizzle of
// that span writes it (16-byte chunk j of row r at chunk
// j ^ ((r / (128 / kRowBytes)) % (kRowBytes / 16))): start address >> 4 (bits
// 0-13), leading byte offset >> 4 (bits 16-29; unused by swizzled K-major
// layouts, 1 by convention), stride byte offset >> 4 (bits 32-45: one 8-row
// group, 8 kRowBytes), base offset 0 (bits 49-51: tiles are aligned to their
// 8-row group), swizzle mode (bits 62-63: 1 = 128 bytes, 2 = 64, 3 = 32). The
// k-th 32 bytes of the rows (one k8 TF32 / k16 BF16 step) start 2k units later.
template <int kRowBytes = kWgmmaRowBytes>
__device__ inline std::uint64_t swizzled_descriptor(unsigned shared_byte_address) {
  static_assert(kRowBytes == 128 || kRowBytes == 64 || kRowBytes == 32, "wgmma swizzles 128, 64 or 32 bytes");
  constexpr std::uint64_t kMode = kRowBytes == 128 ? 1 : kRowBytes == 64 ? 2 : 3;
  return static_cast<std::uint64_t>((shared_byte_address & 0x3ffff) >> 4) | (std::uint64_t{1} << 16) |
         (static_cast<std::uint64_t>(8 * kRowBytes >> 4) << 32) | (kMode << 62);
}

// d[64 x 128] += a[64 x 8] b[8 x 128]^T, TF32, both K-major in shared memory.
__device__ inline void wgmma_tf32(float (&d)[16][4], std::uint64_t a, std::uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, p, 1, 1;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                 "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                 "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                 "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                 "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
                 "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                 "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
                 "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                 "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               : "l"(a), "l"(b));
}

// wgmma shared-memory matrix descriptor of an MN-major (transposed) 16-bit
// operand swizzled over 128 bytes, as a TMA box with 64 MN elements
// innermost writes it: K row k of an 8-row group at byte 128 k, groups
// `group_bytes` apart (stride byte offset), 64-element blocks of MN
// `block_bytes` apart (leading byte offset); chunk swizzle as for K-major.
// The k-th 16 rows (one k16 BF16 step) start 2 groups later.
__device__ inline std::uint64_t mn_major_descriptor(unsigned shared_byte_address, unsigned block_bytes,
                                                    unsigned group_bytes) {
  return static_cast<std::uint64_t>((shared_byte_address & 0x3ffff) >> 4) |
         (static_cast<std::uint64_t>(block_bytes >> 4) << 16) | (static_cast<std::uint64_t>(group_bytes >> 4) << 32) |
         (std::uint64_t{1} << 62);
}

// d[64 x 128] += a[64 x 16] b[16 x 128]^T, BF16, A K-major; B K-major
// (kTransposeB = 0) or MN-major (1: its 128 N elements contiguous per k).
template <int kTransposeB = 0>
__device__ inline void wgmma_bf16(float (&d)[16][4], std::uint64_t a, std::uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, p, 1, 1, 0, %66;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                 "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                 "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                 "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                 "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
                 "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                 "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
                 "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                 "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               : "l"(a), "l"(b), "n"(kTransposeB));
}

// mbarriers of a ring's slots (shared::cta addresses).
__device__ inline void barrier_init(unsigned barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count));
}

__device__ inline void barrier_arrive(unsigned barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// One arrival that also expects `bytes` from the TMA before the phase completes.
__device__ inline void barrier_expect_bytes(unsigned barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}

// Waits until the barrier's phase of the given parity has completed (a
// fresh barrier counts the phase before its first, parity 1, as completed).
__device__ inline void barrier_wait(unsigned barrier, unsigned parity) {
  asm volatile("{\n.reg .pred done;\nwait:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait;\n}\n" ::"r"(barrier),
               "r"(parity)
               : "memory");
}

// TMA loads of one box into shared memory, completing its bytes on the
// barrier: coordinates innermost first, in elements (negative or past the
// end: zeros).
__device__ inline void tma_load_2d(unsigned destination, const void* map, int c0, int c1, unsigned barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
               "[%4];\n" ::"r"(destination),
               "l"(map), "r"(c0), "r"(c1), "r"(barrier)
               : "memory");
}

__device__ inline void tma_load_4d(unsigned destination, const void* map, int c0, int c1, int c2, int c3,
                                   unsigned barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(destination),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
}

__device__ inline void tma_load_5d(unsigned destination, const void* map, int c0, int c1, int c2, int c3, int c4,
                                   unsigned barrier) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5, %6}], [%7];\n" ::"r"(destination),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(barrier)
      : "memory");
}

// Keeps the compiler from moving accesses of the accumulators across the
// wgmma fence / wait (wgmma writes them asynchronously).
__device__ inline void fence_accumulators(float (&d)[16][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// Orders this thread's earlier register and shared-memory accesses before the wgmmas that follow.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Closes the wgmmas issued since the last commit into one group.
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most `pending` committed groups are still running.
template <int pending>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// A ring of kStages slots fed by the TMA from one producer thread and
// consumed by the block's wgmma warps: `full` and `empty` are kStages
// mbarriers each (8 bytes apart). A slot's `full` completes when its boxes
// have landed, its `empty` when every consumer warp is done with the
// products that read it.
template <int kStages>
struct TmaRing {
  unsigned full, empty;

  // Thread 0 initialises the barriers; the caller then syncs the block.
  __device__ void init(int consumer_warps) const {
    if (threadIdx.x != 0) return;
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(full + 8 * stage, 1);
      barrier_init(empty + 8 * stage, static_cast<unsigned>(consumer_warps));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }

  // Producer: waits until the slot of tile k is free (its first use waits
  // on the phase before the barrier's first, parity 1, which counts as
  // complete), expects `bytes` on it and returns the slot.
  __device__ int acquire(int k, unsigned bytes) const {
    const int stage = k % kStages;
    barrier_wait(empty + 8 * stage, ((k / kStages) & 1) ^ 1);
    barrier_expect_bytes(full + 8 * stage, bytes);
    return stage;
  }

  // Consumers: for each of k_tiles tiles, waits for its slot, issues
  // multiply(stage) (the slot's wgmmas) as one group and keeps one group in
  // flight: tile k-1's slot is released once tile k's products are issued
  // and k-1's are done. Returns with every product done.
  template <class Multiply>
  __device__ void consume(int k_tiles, float (&acc)[16][4], Multiply&& multiply) const {
    const int lane = threadIdx.x % 32;
    for (int k = 0; k < k_tiles; ++k) {
      const int stage = k % kStages;
      barrier_wait(full + 8 * stage, (k / kStages) & 1);
      fence_accumulators(acc);
      wgmma_fence();
      multiply(stage);
      wgmma_commit();
      wgmma_wait<1>();
      fence_accumulators(acc);
      if (k > 0 && lane == 0) barrier_arrive(empty + 8 * ((k - 1) % kStages));
    }
    wgmma_wait<0>();
    fence_accumulators(acc);
  }
};
#endif

}  // namespace plexus::layers::implicit_gemm::detail

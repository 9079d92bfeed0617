#pragma once
// The implicit-GEMM convolution engine's shared device pieces (mappings and
// formulas in implicit_gemm.h); implicit_gemm_gather.cu and
// implicit_gemm_weight_grad.cu hold its kernels and host code.
//
// Every pass is a GEMM C[M, N] = A[M, K] B[K, N] on tensor cores, f32
// accumulators: TF32 mma.sync m16n8k8 or, when the Context's precision is
// bf16, BF16 m16n8k16 (Tf32Product, Bf16Product):
//   forward          M = Co, N = batch*Ho*Wo output pixels, K = Ci*k*k taps;
//                    A = the weight, B = input patches gathered on the fly
//                    (from an NHWC copy of X when Ci >= kTapMajorChannels).
//   backward_data    per phase (h mod s, w mod s): M = Ci, N = the phase's
//                    pixels, K = Co * (the taps reaching that phase);
//                    A = the weight re-packed per phase, B = gathered Y
//                    (from an NHWC copy of Y when Co >= kTapMajorChannels).
//   backward_weight  M = Co, N = Ci*k*k, K = batch*Ho*Wo pixels, split over
//                    blocks; A = Y, B = input patches (from an NHWC copy of
//                    X when Ci is a multiple of 128; under bf16 then from
//                    bf16 copies of X and Y); partial sums reduced.
// A thread block computes a BM x BN tile of C, walking K in stages of BK
// through a STAGES-deep cp.async ring in shared memory (see Tile); each of its
// 8 warps owns a (BM/WARPS_M) x (BN/WARPS_N) sub-tile of m16n8 accumulators.
// When the tiles of C would not fill the GPU once, K is also split over
// blocks and the partial sums are added in a fixed order (deterministic).

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "convolution/implicit_gemm.h"
#include "convolution/nhwc_layout.h"
#include "convolution/scratch.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/cuda/shared_memory_ops.h"
#include "plexus/cuda/tensor_core_product.h"

// Internal to the engine's two .cu files.
namespace plexus::layers::implicit_gemm::detail {

constexpr int kThreads = 256;  // 8 warps per block
// A K-contiguous tile is [rows][BK + 4]: a row stride of 20 or 36 words puts
// the 32 fragment reads of a warp (rows g, columns t) in 32 different banks.
// An N-contiguous tile is [BK][BN + 8]: a stride of 8 (mod 32) words does the same.
constexpr int kColumnPad = 8;
// A tap row offset that no bounds check accepts (images are at most kMaxExtent high and wide).
constexpr int kInvalidTap = 1 << 14;
static_assert(kInvalidTap > kMaxExtent + 64, "an invalid tap must fail every bounds check");

// cp.async copies and ldmatrix loads (plexus/cuda/shared_memory_ops.h).
using cuda::commit_async;
using cuda::copy16_async;
using cuda::copy16_async_zfill;
using cuda::copy4_async;
using cuda::copy8_async_zfill;
using cuda::load_matrix_x4;
using cuda::load_matrix_x4_trans;
using cuda::shared_address;
using cuda::wait_async;

// The tensor-core product the engine runs on f32 tiles, chosen by the
// Context's precision (plexus/cuda/tensor_core_product.h; the tap-major
// weight gradient's BF16 path stages bf16 tiles instead:
// implicit_gemm_bf16.cuh).
using cuda::Bf16Product;
using cuda::mma_bf16;
using cuda::mma_tf32;
using cuda::pack_bf16x2;
using cuda::Tf32Product;

// A block's tile of C (BM x BN, 8 warps of WARPS_M x WARPS_N) and its K
// pipeline: BK per stage, STAGES-deep cp.async ring. BLOCKS: the blocks per
// multiprocessor the registers are budgeted for (launch bounds; 1 lets a
// thread use up to 255 registers, for warp tiles of 64x64).
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int BK_, int STAGES_, int BLOCKS_ = 2>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int BK = BK_, STAGES = STAGES_, BLOCKS = BLOCKS_;
  static constexpr int KStride = BK + 4;                      // row stride of a K-contiguous tile
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's sub-tile
  static constexpr int MT = WM / 16, NT = WN / 8;             // its m16n8 accumulator tiles
  static_assert(WARPS_M * WARPS_N * 32 == kThreads, "8 warps");
  static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tile of whole mma tiles");
  static_assert(BLOCKS == 1 || BLOCKS == 2, "one or two blocks per multiprocessor");
};
// Warp tile 64x32. The gather GEMMs take 32 of K per stage (fewer barriers per
// product). FlatGatherTile (few source channels, NCHW, one table entry per
// element) is double-buffered so two blocks fit a multiprocessor with its
// tables (faster than 16 per stage in a 3-deep ring).
// NhwcGatherTile (tap-major K from the NHWC copy) is 3-deep, two blocks still
// fit (2 x 111 KiB): faster on the conv benchmark's 128-channel rows than
// 2-deep and than 128x256 tiles 3- or 2-deep (lab/bench/conv-tile-sweep.sh
// runs the sweep). The weight gradient from NCHW
// keeps 16 per stage (its per-thread column tables would not fit the
// registers at 32) in a 3-deep ring.
using FlatGatherTile = Tile<128, 128, 2, 4, 32, 2>;
using NhwcGatherTile = Tile<128, 128, 2, 4, 32, 3>;
template <bool tap_major>
using GatherTile = std::conditional_t<tap_major, NhwcGatherTile, FlatGatherTile>;
using WeightGradTile = Tile<128, 128, 2, 4, 16, 3>;
// The tap-major weight gradient (Ci a multiple of 128) reads B from NHWC with
// no column tables, so it takes 32 per stage, 3-deep: the fastest of BK 16/32
// x 3/4 stages on the 128->128 layers at 64x64 and up (lab/bench/wgrad-variants.sh);
// 32 x 4 fits one block per multiprocessor and is slower.
using WeightGradNhwcTile = Tile<128, 128, 2, 4, 32, 3>;
static_assert(kTapAlign % FlatGatherTile::BK == 0, "flat tap tables are whole stages");
static_assert(NhwcGatherTile::BK % kTapAlign == 0, "tap-major K (taps x channel_pad) is a multiple of kTapAlign");

// Floats of one pipeline stage of the gather GEMM's B tile: K-contiguous
// [BN][KStride] when K is tap-major (pixels of the NHWC copy, 16 bytes per
// copy), else N-contiguous [BK][BN + kColumnPad] (one element per copy).
template <class T, bool tap_major>
__host__ __device__ constexpr int gather_b_stage() {
  return tap_major ? T::BN * T::KStride : T::BK * (T::BN + kColumnPad);
}

// The products of one pipeline stage: acc += A_tile B_tile over BK, in steps
// of 8 * Product::kGroups.
// A is [BM][KStride] (K contiguous). B is [BN][KStride] when
// b_k_contiguous, else [BK][BN + kColumnPad]. Fragment layouts of
// m16n8k8 (g = lane/4, t = lane%4): a = A(g, t), A(g+8, t), A(g, t+4),
// A(g+8, t+4); b = B(k=t, n=g), B(k=t+4, n=g). b_ldmatrix (K-contiguous B
// only): the b fragments of two n8 tiles come from one ldmatrix, like A's.
template <class Product, class T, bool b_k_contiguous, bool b_ldmatrix = false>
__device__ inline void multiply_stage(const float* a_tile, const float* b_tile, int warp_m0, int warp_n0, int lane,
                                      float (&acc)[T::MT][T::NT][4]) {
  const int g = lane >> 2, t = lane & 3;
  constexpr int kKStride = T::KStride, kGroups = Product::kGroups;
  static_assert(T::KStride % 4 == 0, "ldmatrix rows are 16-byte aligned");
  static_assert(T::BK % (8 * kGroups) == 0, "a stage is whole product steps");
  static_assert(!b_ldmatrix || (b_k_contiguous && T::NT % 2 == 0), "ldmatrix reads pairs of K-contiguous n8 tiles");
#pragma unroll
  for (int k_step = 0; k_step < T::BK; k_step += 8 * kGroups) {
    unsigned a[T::MT][kGroups][4], b[T::NT][kGroups][2];
#pragma unroll
    for (int group = 0; group < kGroups; ++group) {
      const int k8 = k_step + 8 * group;
      // A fragments by ldmatrix: matrices (rows 0-7 | 8-15) x (k 0-3 | 4-7) give
      // a0..a3 in order when lane l points at row l%8 + 8*((l/8)&1), k 4*(l/16).
      const int quad = lane >> 3;
#pragma unroll
      for (int mt = 0; mt < T::MT; ++mt)
        load_matrix_x4(a[mt][group],
                       a_tile + (warp_m0 + mt * 16 + (lane & 7) + 8 * (quad & 1)) * kKStride + k8 + 4 * (quad >> 1));
      if constexpr (b_ldmatrix) {
        // Matrices (n8 tile nt | nt+1) x (k 0-3 | 4-7) give b[nt][0], b[nt][1],
        // b[nt+1][0], b[nt+1][1] when lane l points at row l%8 of tile
        // nt + l/16, k 4*((l/8)&1).
#pragma unroll
        for (int nt = 0; nt < T::NT; nt += 2) {
          unsigned r[4];
          load_matrix_x4(r, b_tile + (warp_n0 + (nt + (quad >> 1)) * 8 + (lane & 7)) * kKStride + k8 + 4 * (quad & 1));
          b[nt][group][0] = r[0];
          b[nt][group][1] = r[1];
          b[nt + 1][group][0] = r[2];
          b[nt + 1][group][1] = r[3];
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < T::NT; ++nt) {
          if constexpr (b_k_contiguous) {
            const float* p = b_tile + (warp_n0 + nt * 8 + g) * kKStride + k8 + t;
            b[nt][group][0] = __float_as_uint(p[0]);
            b[nt][group][1] = __float_as_uint(p[4]);
          } else {
            constexpr int stride = T::BN + kColumnPad;
            const float* p = b_tile + (k8 + t) * stride + warp_n0 + nt * 8 + g;
            b[nt][group][0] = __float_as_uint(p[0]);
            b[nt][group][1] = __float_as_uint(p[4 * stride]);
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::NT; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
  }
}

// A block's K loop over a STAGES-deep cp.async ring, shared by the engine's
// kernels: acc is zeroed, then for k_tile = 0 .. k_tiles-1, in order,
// load(slot, k_tile) queues tile k_tile into ring slot k_tile % STAGES (up to
// STAGES-1 tiles ahead) and multiply(slot, acc) runs the products of a slot
// once every thread's copies into it have landed. landed() runs in every
// thread after its copies of a tile have landed and before the barrier that
// publishes them (the wgmma kernel fences them for the async proxy there).
// kAhead: how many tiles the loads run ahead of the products, STAGES - 1
// unless the products of a slot may still be reading it after multiply
// returns (asynchronous wgmma): then STAGES - 2 keeps one slot for them.
template <class T, int kAhead = T::STAGES - 1, class Load, class Multiply, class Landed>
__device__ __forceinline__ void run_k_pipeline(int k_tiles, float (&acc)[T::MT][T::NT][4], Load&& load,
                                               Multiply&& multiply, Landed&& landed) {
  constexpr int kStages = T::STAGES;
  static_assert(kAhead >= 1 && kAhead < kStages, "loads run ahead into free slots");
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
#pragma unroll
  for (int stage = 0; stage < kAhead; ++stage) {
    if (stage < k_tiles) load(stage, stage);
    commit_async();
  }
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_async<kAhead - 1>();  // tile k_tile has landed (for this thread) ...
    landed();
    __syncthreads();  // ... for every thread, and the slot about to be refilled is no longer read
    const int next = k_tile + kAhead;
    if (next < k_tiles) load(next % kStages, next);
    commit_async();
    multiply(k_tile % kStages, acc);
  }
  wait_async<0>();
}

template <class T, class Load, class Multiply>
__device__ __forceinline__ void run_k_pipeline(int k_tiles, float (&acc)[T::MT][T::NT][4], Load&& load,
                                               Multiply&& multiply) {
  run_k_pipeline<T>(k_tiles, acc, load, multiply, [] {});
}

// Host helpers shared by both passes' launchers.

// Opts a kernel into more than 48 KiB of dynamic shared memory (once per kernel).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, std::size_t bytes, const char* name) {
  cuda::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                   name, __FILE__, __LINE__);
}

inline int multiprocessor_count(const Context& ctx) {
  int count = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, cuda::resources(ctx).device),
                   "cudaDeviceGetAttribute(multiprocessors)", __FILE__, __LINE__);
  return std::max(count, 1);
}

// How many slices to split a GEMM's K into: enough that `blocks` tiles
// (blocks_per_multiprocessor resident at once) fill the GPU once, keeping at
// least 8 stages of K per slice, and at most `most`.
inline long long k_splits(const Context& ctx, int blocks_per_multiprocessor, long long blocks, long long k_tiles,
                          long long most = 1LL << 30) {
  const long long resident = static_cast<long long>(blocks_per_multiprocessor) * multiprocessor_count(ctx);
  return std::max(1LL, std::min({resident / std::max(blocks, 1LL), k_tiles / 8, most}));
}

// The tap-major gathers' source: an NHWC copy of the NCHW `source` [batch,
// channels, height, width] (Source: float, or BFloat16 for a tensor stored
// in bf16) with channel_pad channels (zeros past `channels`), in `buffer`.
// nchw_to_nhwc_cuda takes at most 65535 images per call.
template <class Source>
const float* nhwc_source(const Context& ctx, const Source* source, long long batch, long long channels,
                         long long height, long long width, int channel_pad, Tensor& buffer) {
  constexpr long long kImagesPerCopy = 65535;
  float* nhwc = grown_scratch(ctx, buffer, {batch, height, width, channel_pad}, DType::f32).data<float>();
  const long long plane = height * width;
  for (long long first = 0; first < batch; first += kImagesPerCopy)
    nchw_to_nhwc_cuda(ctx, source + first * channels * plane, std::min(kImagesPerCopy, batch - first), channels, plane,
                      channel_pad, nhwc + first * plane * channel_pad);
  return nhwc;
}

}  // namespace plexus::layers::implicit_gemm::detail

#pragma once
// BF16 operands in shared memory for the implicit-GEMM engine: tiles hold
// 16-bit bf16 patterns (rounded once, nearest even, by the copies that feed
// them: nchw_to_nhwc_bf16_cuda, nchw_to_channel_rows_bf16_cuda), so a stage
// stages twice the K per byte of an f32 tile and the warps form their
// m16n8k16 fragments by ldmatrix with no conversion in the inner loop.
// Used by the tap-major weight gradient (implicit_gemm_weight_grad.cu).

#include <cstdint>

#include "convolution/implicit_gemm_common.cuh"

namespace plexus::layers::implicit_gemm::detail {

// bf16 elements added to each row of a bf16 tile: a row stride of 16 bytes
// more than a multiple of 32 (or an odd number of 16-byte units) puts the 8
// rows one ldmatrix matrix reads in 8 different 16-byte bank groups.
constexpr int kBf16RowPad = 8;

// Strides (bf16 elements) of a Tile's bf16 stages: A K-contiguous
// [BM][BK + pad], B N-contiguous [BK][BN + pad].
template <class T>
struct Bf16Stage {
  static constexpr int AStride = T::BK + kBf16RowPad;
  static constexpr int BStride = T::BN + kBf16RowPad;
  static constexpr int AElements = T::BM * AStride;
  static constexpr int BElements = T::BK * BStride;
  static_assert((AStride / 8) % 2 == 1 && (BStride / 8) % 2 == 1, "rows an odd number of 16-byte units apart");
  static_assert(T::BK % 16 == 0, "a stage is whole m16n8k16 steps");
};

// acc += A_tile B_tile over one stage (BK), m16n8k16 BF16 mma, f32 accumulation.
// A is [BM][AStride] (K contiguous), B is [BK][BStride] (N contiguous).
// m16n8k16 fragments (g = lane/4, t = lane%4): a = A(g, 2t..2t+1),
// A(g+8, 2t..), A(g, 2t+8..), A(g+8, 2t+8..); b = B(k=2t..2t+1, n=g),
// B(k=2t+8..2t+9, n=g).
//   A: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) give a0..a3 when lane l
//      points at row l%8 + 8*((l/8)&1), k 8*(l/16).
//   B: transposed matrices (k 0-7 | 8-15) x (n8 tile nt | nt+1) give
//      b[nt][0], b[nt][1], b[nt+1][0], b[nt+1][1] when lane l points at k row
//      l%8 + 8*((l/8)&1), columns of tile nt + l/16.
template <class T>
__device__ inline void multiply_stage_bf16(const std::uint16_t* a_tile, const std::uint16_t* b_tile, int warp_m0,
                                           int warp_n0, int lane, float (&acc)[T::MT][T::NT][4]) {
  using Stage = Bf16Stage<T>;
  static_assert(T::NT % 2 == 0, "ldmatrix reads pairs of n8 tiles");
  const int row = (lane & 7) + 8 * ((lane >> 3) & 1), half = lane >> 4;
#pragma unroll
  for (int k16 = 0; k16 < T::BK; k16 += 16) {
    unsigned a[T::MT][4], b[T::NT][2];
#pragma unroll
    for (int mt = 0; mt < T::MT; ++mt)
      load_matrix_x4(a[mt], a_tile + (warp_m0 + mt * 16 + row) * Stage::AStride + k16 + 8 * half);
#pragma unroll
    for (int nt = 0; nt < T::NT; nt += 2) {
      unsigned r[4];
      load_matrix_x4_trans(r, b_tile + (k16 + row) * Stage::BStride + warp_n0 + (nt + half) * 8);
      b[nt][0] = r[0];
      b[nt][1] = r[1];
      b[nt + 1][0] = r[2];
      b[nt + 1][1] = r[3];
    }
#pragma unroll
    for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::NT; ++nt) mma_bf16(acc[mt][nt], a[mt], b[nt]);
  }
}

// A scratch buffer of `count` bf16 patterns (kept in an f32 tensor of half
// as many elements: the Tensor type has no 16-bit dtype).
inline std::uint16_t* bf16_scratch(const Context& ctx, Tensor& buffer, long long count) {
  return reinterpret_cast<std::uint16_t*>(grown_scratch(ctx, buffer, {(count + 1) / 2}, DType::f32).data<float>());
}

// nhwc_source with every value rounded to bf16 (nearest even), in `buffer`.
template <class Source>
const std::uint16_t* nhwc_source_bf16(const Context& ctx, const Source* source, long long batch, long long channels,
                                      long long height, long long width, int channel_pad, Tensor& buffer) {
  constexpr long long kImagesPerCopy = 65535;  // nchw_to_nhwc_bf16_cuda's limit per call
  const long long plane = height * width;
  std::uint16_t* nhwc = bf16_scratch(ctx, buffer, batch * plane * channel_pad);
  for (long long first = 0; first < batch; first += kImagesPerCopy)
    nchw_to_nhwc_bf16_cuda(ctx, source + first * channels * plane, std::min(kImagesPerCopy, batch - first), channels,
                           plane, channel_pad, nhwc + first * plane * channel_pad);
  return nhwc;
}

}  // namespace plexus::layers::implicit_gemm::detail

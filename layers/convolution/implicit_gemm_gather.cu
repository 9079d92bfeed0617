// The implicit-GEMM engine's forward and backward_data: C = packed weight x
// gathered source pixels (mappings in implicit_gemm.h, the shared tiles and
// products in implicit_gemm_common.cuh).
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>

#include "activation_storage.h"
#include "convolution/channel_ops.h"
#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm_bf16.cuh"
#include "convolution/implicit_gemm_gather.cuh"

namespace plexus::layers::implicit_gemm {

namespace {

using namespace detail;

// grid = (N tiles of the largest part x parts, M tiles, K splits)
// (gather_block). Each block first writes its part's tap table to shared
// memory: entry k holds the source offset of tap k relative to the pixel's
// base and the tap's (row, column) displacement for the bounds check, so the
// gather needs no division.
template <class Product, class T, bool tap_major>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) gather_gemm_kernel(const GatherParams params) {
  const GatherBlock block = gather_block<T::BM, T::BN, T::BK>(params);
  if (block.n0 >= block.n_size) return;  // the whole block: this part has fewer tiles than the largest
  const GatherPart& part = *block.part;
  const int tid = threadIdx.x;
  const float* source_data = static_cast<const float*>(params.source);

  constexpr int kTileK = T::BK, kStages = T::STAGES, kKStride = T::KStride;
  extern __shared__ __align__(16) float shared[];
  float* a_tiles = shared;  // kStages x [BM][kKStride]
  constexpr int a_stage = T::BM * kKStride, b_stage = gather_b_stage<T, tap_major>();
  float* b_tiles = a_tiles + kStages * a_stage;  // kStages x (tap-major: [BN][kKStride]; flat: [kTileK][BN + pad])
  int2* taps = reinterpret_cast<int2*>(b_tiles + kStages * b_stage);

  const int source_plane = params.source_h * params.source_w;
  const int taps_per_channel = part.taps_h * part.taps_w;
  if constexpr (tap_major) write_tap_major_table(params, part, taps);
  for (int k = tid; !tap_major && k < part.k_stride; k += kThreads) {
    int2 entry;
    if (k < part.k_size) {
      const int channel = k / taps_per_channel, tap = k - channel * taps_per_channel;
      const int di = (tap / part.taps_w) * part.tap_step, dj = (tap % part.taps_w) * part.tap_step;
      entry.x = channel * source_plane + di * params.source_w + dj;
      entry.y = static_cast<int>((static_cast<unsigned>(di) << 16) | (static_cast<unsigned>(dj) & 0xffffu));
    } else {
      entry.x = 0;
      entry.y = static_cast<int>(static_cast<unsigned>(kInvalidTap) << 16);
    }
    taps[k] = entry;
  }

  // B loads. The pixels (tile columns) this thread loads are fixed, so they
  // are decoded once. Tap-major: thread tid copies 16-byte chunk tid % chunks
  // of the stage's BK channels for pixels tid / chunks + r * pixel_step
  // (BK/4 neighbouring threads read one pixel's BK contiguous floats, and
  // write one row of the tile: no bank conflicts). Flat: it copies column
  // tid % BN for rows tid / BN + r * b_row_step.
  constexpr int b_chunks = kTileK / 4, b_pixel_step = kThreads / b_chunks;
  constexpr int b_pixels = tap_major ? T::BN / b_pixel_step : 1;
  static_assert(!tap_major || T::BN % b_pixel_step == 0, "whole chunk passes over the tile's pixels");
  constexpr int b_row_step = kThreads / T::BN;
  constexpr int b_loads = kTileK / b_row_step;
  const int b_chunk = tid % b_chunks;
  const int b_column = tap_major ? tid / b_chunks : tid % T::BN, b_row = tid / T::BN;
  // b_base: tap-major, the pixel's index in the batch's NHWC pixels (fits an
  // int: supports() bounds batch * plane); flat, its NCHW element offset.
  std::conditional_t<tap_major, int, long long> b_base[b_pixels];
  int row0[b_pixels], col0[b_pixels];
#pragma unroll
  for (int r = 0; r < b_pixels; ++r) {
    const GatherPixel pixel = gather_pixel(params, block, block.n0 + b_column + r * b_pixel_step);
    row0[r] = pixel.row0;
    col0[r] = pixel.col0;
    const int offset = pixel.valid ? pixel.row0 * params.source_w + pixel.col0 : 0;
    if constexpr (tap_major) b_base[r] = pixel.image * source_plane + offset;
    else b_base[r] = static_cast<long long>(pixel.image) * params.source_channels * source_plane + offset;
  }
  const float* a_rows =
      static_cast<const float*>(params.a) + part.a_offset + static_cast<long long>(block.m0) * part.k_stride;

  auto load_stage = [&](int stage, int k_tile) {
    float* a_tile = a_tiles + stage * a_stage;
    constexpr int a_vectors = T::BM * kTileK / 4;
#pragma unroll
    for (int i = tid; i < a_vectors; i += kThreads) {
      const int row = i / (kTileK / 4), k4 = (i % (kTileK / 4)) * 4;
      copy16_async(a_tile + row * kKStride + k4,
                   a_rows + static_cast<long long>(row) * part.k_stride + k_tile * kTileK + k4);
    }
    float* b_tile = b_tiles + stage * b_stage;
    if constexpr (tap_major) {
      // Stage k_tile is channels [c0, c0 + BK) of one tap: per pixel, BK
      // contiguous floats of the NHWC copy (zeros past the real channels).
      const int tiles_per_tap = params.channel_pad / kTileK;
      const int tap = k_tile / tiles_per_tap;
      const int c0 = (k_tile - tap * tiles_per_tap) * kTileK;
      const int2 entry = taps[tap];
      const int di = entry.y >> 16, dj = static_cast<short>(entry.y & 0xffff);
      const float* source = source_data + c0 + 4 * b_chunk;
#pragma unroll
      for (int r = 0; r < b_pixels; ++r) {
        const bool inside = static_cast<unsigned>(row0[r] + di) < static_cast<unsigned>(params.source_h) &&
                            static_cast<unsigned>(col0[r] + dj) < static_cast<unsigned>(params.source_w);
        const long long offset = static_cast<long long>(b_base[r] + entry.x) * params.channel_pad;
        copy16_async_zfill(b_tile + (b_column + r * b_pixel_step) * kKStride + 4 * b_chunk,
                           inside ? source + offset : source_data, inside);
      }
    } else {
      // Flat K: one table entry per element.
#pragma unroll
      for (int r = 0; r < b_loads; ++r) {
        const int k_local = b_row + r * b_row_step;
        const int2 entry = taps[k_tile * kTileK + k_local];
        const int di = entry.y >> 16, dj = static_cast<short>(entry.y & 0xffff);
        const bool inside = static_cast<unsigned>(row0[0] + di) < static_cast<unsigned>(params.source_h) &&
                            static_cast<unsigned>(col0[0] + dj) < static_cast<unsigned>(params.source_w);
        copy4_async(b_tile + k_local * (T::BN + kColumnPad) + b_column,
                    inside ? source_data + b_base[0] + entry.x : source_data, inside);
      }
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;

  __syncthreads();  // the tap table is complete
  float acc[T::MT][T::NT][4];
  run_k_pipeline<T>(
      block.k_tiles, acc, [&](int stage, int k_tile) { load_stage(stage, block.k_first + k_tile); },
      [&](int stage, float(&sums)[T::MT][T::NT][4]) {
        multiply_stage<Product, T, tap_major, tap_major>(a_tiles + stage * a_stage, b_tiles + stage * b_stage, warp_m0,
                                                         warp_n0, lane, sums);
      });
  static_assert(staging_bytes<T>() <= sizeof(float) * kStages * (a_stage + b_stage),
                "the C tile is staged in the operand rings");
  store_gather_tile<T>(params, block, warp_m0, warp_n0, lane, acc, shared);
}

// dest[n, m, q] = activation(bias[m] + sum over splits of partial[split][n, m, q]),
// summed in f32 and stored as Dest (f32, or BFloat16 rounded to nearest even);
// grid-stride, consecutive threads on consecutive q (coalesced).
template <class Dest>
__global__ void reduce_splits_kernel(const float* partial, int splits, long long size, int m_size, int plane,
                                     const float* bias, bool activate, float negative_slope, Dest* dest) {
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < size;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    float sum = bias ? bias[(index / plane) % m_size] : 0.0f;
    for (int split = 0; split < splits; ++split) sum += partial[split * size + index];
    store_f32(dest + index, activated(sum, activate, negative_slope));
  }
}

// Packs the weight W [Co, Ci, k, k] into each part's A [m_pad][k_stride],
// zero beyond m_size and k_size:
//   forward:        A[o][(c, i, j)]   = W[o, c, i, j]
//   backward_data:  A[c][(o, ti, tj)] = W[o, c, tap_row0 + s*ti, tap_col0 + s*tj]
// as f32, or (Packed = std::uint16_t, the wgmma BF16 operand) as bf16 bit
// patterns rounded to nearest even. grid.y = part; grid-stride over the part's elements.
struct PackPart {
  int k_size, k_stride, taps_h, taps_w, tap_row0, tap_col0;
  long long offset;
};

struct PackParams {
  const float* weight;
  void* packed;  // f32 or bf16 bit patterns
  int m_size, m_pad;
  int in_channels, kernel, stride;
  bool transpose;   // backward_data
  int channels;     // source channels: Ci (forward) or Co (backward_data)
  int channel_pad;  // tap-major K (see GatherPart); 0: flat K
  PackPart parts[kMaxPhases];
};

template <class Packed>
__global__ void pack_weight_kernel(const PackParams params) {
  const PackPart& part = params.parts[blockIdx.y];
  Packed* packed = static_cast<Packed*>(params.packed);
  const long long total = static_cast<long long>(params.m_pad) * part.k_stride;
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(index / part.k_stride), k = static_cast<int>(index % part.k_stride);
    float value = 0.0f;
    if (m < params.m_size && k < part.k_size && params.channel_pad > 0) {
      // Tap-major: k = tap*channel_pad + c.
      const int tap = k / params.channel_pad, c = k % params.channel_pad;
      const int i = part.tap_row0 + params.stride * (tap / part.taps_w);
      const int j = part.tap_col0 + params.stride * (tap % part.taps_w);
      const long long o = params.transpose ? c : m, ci = params.transpose ? m : c;
      if (c < params.channels)
        value = params.weight[((o * params.in_channels + ci) * params.kernel + i) * params.kernel + j];
    } else if (m < params.m_size && k < part.k_size) {
      if (!params.transpose) {
        value = params.weight[static_cast<long long>(m) * part.k_size + k];
      } else {
        const int taps = part.taps_h * part.taps_w;
        const int o = k / taps, tap = k % taps;
        const int i = part.tap_row0 + params.stride * (tap / part.taps_w);
        const int j = part.tap_col0 + params.stride * (tap % part.taps_w);
        value =
            params
                .weight[((static_cast<long long>(o) * params.in_channels + m) * params.kernel + i) * params.kernel + j];
      }
    }
    store_f32(packed + part.offset + index, value);
  }
}

// ---------------------------------------------------------------------------
// Host side.

// The A and B rings plus a tap table of table_entries.
template <class T, bool tap_major>
std::size_t gather_shared_bytes(int table_entries) {
  return sizeof(float) * T::STAGES * (T::BM * T::KStride + gather_b_stage<T, tap_major>()) +
         sizeof(int2) * static_cast<std::size_t>(table_entries);
}

// Packs the weight when the kernel cannot read it in place (forward with a
// K that is a multiple of kTapAlign, M a multiple of BM and 16-byte alignment
// reads W directly). bf16: packs bf16 bit patterns (the wgmma BF16 operand;
// never in place). Returns A.
const void* pack_weight(const Context& ctx, const PackParams& pack, int part_count, long long total, bool in_place,
                        bool bf16, Tensor& buffer) {
  if (in_place && !bf16) return pack.weight;
  PackParams filled = pack;
  // bf16: two patterns per f32 element of the buffer.
  const long long floats = bf16 ? ceil_div(total, 2) : total;
  filled.packed = grown_scratch(ctx, buffer, {floats}, DType::f32).data<float>();
  long long largest = 0;
  for (int p = 0; p < part_count; ++p)
    largest = std::max(largest, static_cast<long long>(pack.m_pad) * pack.parts[p].k_stride);
  if (largest > 0) {
    const dim3 grid(cuda::blocks_for(largest), static_cast<unsigned>(part_count));
    if (bf16) pack_weight_kernel<std::uint16_t><<<grid, 256, 0, cuda::stream(ctx)>>>(filled);
    else pack_weight_kernel<float><<<grid, 256, 0, cuda::stream(ctx)>>>(filled);
    cuda::check_launch("pack_weight_kernel", __FILE__, __LINE__);
  }
  return filled.packed;
}

// Launches gather_gemm_kernel with the given product and K order (opting it
// into its shared memory on first use).
template <class Product, bool tap_major>
void launch_gather(const Context& ctx, const GatherParams& params, dim3 grid, std::size_t shared_bytes) {
  using T = GatherTile<tap_major>;
  static const bool opted_in =
      (allow_shared_bytes(gather_gemm_kernel<Product, T, tap_major>, gather_shared_bytes<T, tap_major>(kMaxTaps),
                          "cudaFuncSetAttribute(gather_gemm_kernel)"),
       true);
  (void)opted_in;
  gather_gemm_kernel<Product, T, tap_major><<<grid, kThreads, shared_bytes, cuda::stream(ctx)>>>(params);
}

// dest = activation(bias + the sum of the K splits' partial sums), when K was split.
void add_split_sums(const Context& ctx, const GatherParams& params) {
  if (params.splits <= 1) return;
  const unsigned reduce_blocks = cuda::blocks_for(params.dest_size);
  const int plane = params.dest_h * params.dest_w;
  if (params.dest_bf16)
    reduce_splits_kernel<BFloat16><<<reduce_blocks, 256, 0, cuda::stream(ctx)>>>(
        params.partial, params.splits, params.dest_size, params.m_size, plane, params.bias, params.activate,
        params.negative_slope, static_cast<BFloat16*>(params.dest));
  else
    reduce_splits_kernel<float><<<reduce_blocks, 256, 0, cuda::stream(ctx)>>>(
        params.partial, params.splits, params.dest_size, params.m_size, plane, params.bias, params.activate,
        params.negative_slope, static_cast<float*>(params.dest));
  cuda::check_launch("reduce_splits_kernel", __FILE__, __LINE__);
}

// Runs the gather GEMM over params.part_count parts: with wgmma (Hopper,
// tap-major K only: the TMA-fed kernel where it takes the problem, else the
// copying one; params.a and params.source in the operand type of the
// Context's precision) or mma.sync. When its blocks would not fill the GPU
// once (small images, long K), K is split over up to 8x more blocks whose
// partial sums reduce_splits_kernel adds (with the bias). Tap-major:
// params.channel_pad > 0 and params.source is the NHWC copy.
void run_gather(const Context& ctx, GatherParams& params, Tensor& partial_sums, bool wgmma) {
  if (wgmma && run_wgmma_tma_gather(ctx, params, partial_sums)) {
    add_split_sums(ctx, params);
    return;
  }
  // Every variant takes 128 x 128 tiles of C, two blocks per multiprocessor.
  constexpr int kTileM = 128, kTileN = 128, kBlocks = 2;
  static_assert(FlatGatherTile::BM == kTileM && NhwcGatherTile::BM == kTileM && WgmmaGatherTile<32>::BM == kTileM &&
                    FlatGatherTile::BN == kTileN && NhwcGatherTile::BN == kTileN && WgmmaGatherTile<32>::BN == kTileN &&
                    FlatGatherTile::BLOCKS == kBlocks && NhwcGatherTile::BLOCKS == kBlocks &&
                    WgmmaGatherTile<32>::BLOCKS == kBlocks,
                "one tiling of C for every gather kernel");
  const bool tap_major = params.channel_pad > 0, bf16 = ctx.bf16_products();
  const int stage_k = wgmma ? wgmma_stage_k(bf16) : tap_major ? NhwcGatherTile::BK : FlatGatherTile::BK;
  int max_k_stride = 0, max_table = 0;
  long long max_n_tiles = 0, blocks = 0;
  for (int p = 0; p < params.part_count; ++p) {
    const GatherPart& part = params.parts[p];
    max_table = std::max(max_table, tap_major ? part.taps_h * part.taps_w : part.k_stride);
    const long long n_tiles = ceil_div(static_cast<long long>(params.batch) * part.grid_h * part.grid_w, kTileN);
    max_k_stride = std::max(max_k_stride, part.k_stride);
    max_n_tiles = std::max(max_n_tiles, n_tiles);
    blocks += n_tiles * ceil_div(params.m_size, kTileM);
  }
  if (max_n_tiles == 0) return;
  params.splits = static_cast<int>(k_splits(ctx, kBlocks, blocks, max_k_stride / stage_k, 8));
  params.dest_size = static_cast<long long>(params.batch) * params.m_size * params.dest_h * params.dest_w;
  params.partial = nullptr;
  if (params.splits > 1)
    params.partial = grown_scratch(ctx, partial_sums, {params.splits, params.dest_size}, DType::f32).data<float>();
  const dim3 grid(static_cast<unsigned>(max_n_tiles * params.part_count),
                  static_cast<unsigned>(ceil_div(params.m_size, kTileM)), static_cast<unsigned>(params.splits));
  if (wgmma) {
    launch_wgmma_gather(ctx, params, grid, max_table, bf16);
  } else if (tap_major) {
    const std::size_t shared_bytes = gather_shared_bytes<NhwcGatherTile, true>(max_table);
    if (bf16) launch_gather<Bf16Product, true>(ctx, params, grid, shared_bytes);
    else launch_gather<Tf32Product, true>(ctx, params, grid, shared_bytes);
    cuda::check_launch("gather_gemm_kernel", __FILE__, __LINE__);
  } else {
    const std::size_t shared_bytes = gather_shared_bytes<FlatGatherTile, false>(max_table);
    if (bf16) launch_gather<Bf16Product, false>(ctx, params, grid, shared_bytes);
    else launch_gather<Tf32Product, false>(ctx, params, grid, shared_bytes);
    cuda::check_launch("gather_gemm_kernel", __FILE__, __LINE__);
  }
  add_split_sums(ctx, params);
}

// How a pass gathers its source: K order, products and operand format.
struct GatherChoice {
  bool tap_major;   // source channels >= kTapMajorChannels: K tap-major, from an NHWC copy
  bool wgmma;       // tap-major on a Hopper with the sm_90a kernels (uses_wgmma)
  bool bf16;        // wgmma at bf16: operands stored as bf16 bit patterns
  int channel_pad;  // tap-major: the source channels rounded up to a stage; 0 when flat
};

GatherChoice choose_gather(const Context& ctx, long long source_channels) {
  GatherChoice choice{};
  choice.tap_major = source_channels >= kTapMajorChannels;
  choice.wgmma = choice.tap_major && uses_wgmma(ctx);
  choice.bf16 = choice.wgmma && ctx.bf16_products();
  const int stage = choice.wgmma ? wgmma_stage_k(choice.bf16) : NhwcGatherTile::BK;
  choice.channel_pad = choice.tap_major ? static_cast<int>(round_up(source_channels, stage)) : 0;
  return choice;
}

// What the gather reads for the NCHW `source` [batch, channels, height,
// width]: tap-major, its NHWC copy in `nhwc_buffer` (nhwc_source; bf16 bit
// patterns when the wgmma BF16 kernel reads it), copied from an f32 or a bf16
// source alike; flat, the NCHW tensor in f32 (an f32 stand-in in
// `stand_in_buffer` for a bf16 source).
const void* gather_source(Context& ctx, const GatherChoice& choice, const Tensor& source, Tensor& nhwc_buffer,
                          Tensor& stand_in_buffer) {
  if (!choice.tap_major) return f32_stand_in(ctx, source, stand_in_buffer).data<float>();
  const long long batch = source.dim(0), channels = source.dim(1), height = source.dim(2), width = source.dim(3);
  const int pad = choice.channel_pad;
  return dispatch_activation(source, [&](const auto* elements) -> const void* {
    if (!choice.bf16) return nhwc_source(ctx, elements, batch, channels, height, width, pad, nhwc_buffer);
    return nhwc_source_bf16(ctx, elements, batch, channels, height, width, pad, nhwc_buffer);
  });
}

// The NHWC bf16 copy of x in kept (choice.bf16 only), made unless kept holds it.
const void* kept_source(Context& ctx, const GatherChoice& choice, const Tensor& x, KeptSource& kept) {
  if (!kept.holds(x)) {
    dispatch_activation(x, [&](const auto* elements) {
      nhwc_source_bf16(ctx, elements, x.dim(0), x.dim(1), x.dim(2), x.dim(3), choice.channel_pad, kept.buffer);
    });
    kept.made_from = x.raw_data();
    kept.shape = x.shape();
    kept.channel_pad = choice.channel_pad;
  }
  return kept.buffer.data<float>();
}

// The epilogue's fields of GatherParams.
void set_epilogue(GatherParams& params, const Epilogue& epilogue) {
  params.bias = epilogue.bias;
  params.activate = epilogue.activation.active;
  params.negative_slope = static_cast<float>(epilogue.activation.negative_slope);
}

}  // namespace

void keep_source(Context& ctx, const ConvProblem& p, const Tensor& x, KeptSource& kept) {
  const GatherChoice choice = choose_gather(ctx, p.in_channels);
  if (p.batch == 0 || !choice.bf16 || few_channel_conv::takes_forward(p)) return;
  kept.made_from = nullptr;  // x's memory may hold new values since the copy was made
  kept_source(ctx, choice, x, kept);
}

void forward(Context& ctx, const ConvProblem& p, const Tensor& x, const float* weight, const Epilogue& epilogue,
             Tensor& y, Scratch& scratch, KeptSource* kept) {
  if (p.batch == 0) return;
  if (few_channel_conv::takes_forward(p)) {  // writes y in its own dtype; reads an f32 x
    const Tensor x_f32 = f32_stand_in(ctx, x, scratch.forward_source_f32);
    few_channel_conv::forward(ctx, p, x_f32.data<float>(), weight, epilogue, y);
    return;
  }
  const GatherChoice choice = choose_gather(ctx, p.in_channels);
  const bool tap_major = choice.tap_major;
  const int channel_pad = choice.channel_pad;
  const int k_size =
      static_cast<int>(tap_major ? p.kernel * p.kernel * channel_pad : p.in_channels * p.kernel * p.kernel);
  const int k_stride = static_cast<int>(round_up(k_size, kTapAlign));
  const int m_pad = static_cast<int>(round_up(p.out_channels, NhwcGatherTile::BM));

  PackParams pack{};
  pack.weight = weight;
  pack.m_size = static_cast<int>(p.out_channels);
  pack.m_pad = m_pad;
  pack.in_channels = static_cast<int>(p.in_channels);
  pack.kernel = static_cast<int>(p.kernel);
  pack.stride = 1;  // forward taps are consecutive kernel positions
  pack.transpose = false;
  pack.channels = static_cast<int>(p.in_channels);
  pack.channel_pad = channel_pad;
  pack.parts[0] = {k_size, k_stride, static_cast<int>(p.kernel), static_cast<int>(p.kernel), 0, 0, 0};
  const bool in_place =
      !tap_major && k_stride == k_size && m_pad == p.out_channels && reinterpret_cast<std::uintptr_t>(weight) % 16 == 0;
  const void* a = pack_weight(ctx, pack, 1, static_cast<long long>(m_pad) * k_stride, in_place, choice.bf16,
                              scratch.forward_weight);

  GatherParams params{};
  params.a = a;
  params.source = kept && choice.bf16
                      ? kept_source(ctx, choice, x, *kept)
                      : gather_source(ctx, choice, x, scratch.forward_source, scratch.forward_source_f32);
  set_epilogue(params, epilogue);
  params.dest = y.raw_data();
  params.dest_bf16 = y.dtype() == DType::bf16;
  params.m_size = static_cast<int>(p.out_channels);
  params.batch = static_cast<int>(p.batch);
  params.source_channels = static_cast<int>(p.in_channels);
  params.source_h = static_cast<int>(p.height);
  params.source_w = static_cast<int>(p.width);
  params.dest_h = static_cast<int>(p.out_height);
  params.dest_w = static_cast<int>(p.out_width);
  params.source_scale = static_cast<int>(p.stride);
  params.dest_scale = 1;
  params.channel_pad = channel_pad;
  GatherPart& part = params.parts[0];
  part.k_size = k_size;
  part.k_stride = k_stride;
  part.taps_h = part.taps_w = static_cast<int>(p.kernel);
  part.tap_step = 1;
  part.grid_h = static_cast<int>(p.out_height);
  part.grid_w = static_cast<int>(p.out_width);
  part.source_row0 = part.source_col0 = static_cast<int>(-p.padding);
  part.dest_row0 = part.dest_col0 = 0;
  part.a_offset = 0;
  params.part_count = 1;
  run_gather(ctx, params, scratch.forward_sums, choice.wgmma);
}

void backward_data(Context& ctx, const ConvProblem& p, const Tensor& y, const float* weight, const Epilogue& epilogue,
                   Tensor& x, Scratch& scratch) {
  if (p.batch == 0) return;
  // <= 4 channels on X (onto an RGB image): its own kernel, with no rows of zeros.
  if (few_channel_conv::takes_backward_data(p)) {  // reads y in its own dtype; writes an f32 x
    F32Output x_f32(ctx, x, scratch.backward_data_dest_f32);
    float* x_values = x_f32.f32().data<float>();
    few_channel_conv::backward_data(ctx, p, y, weight, epilogue.bias, x_values);
    add_channel_bias_cuda<float>(ctx, nullptr, epilogue.activation, p.batch, p.in_channels, p.height * p.width,
                                 x_values);
    x_f32.store(ctx);
    return;
  }
  const int s = static_cast<int>(p.stride), k = static_cast<int>(p.kernel), pad = static_cast<int>(p.padding);
  const GatherChoice choice = choose_gather(ctx, p.out_channels);
  const bool tap_major = choice.tap_major;
  const int channel_pad = choice.channel_pad;
  const int m_pad = static_cast<int>(round_up(p.in_channels, NhwcGatherTile::BM));

  PackParams pack{};
  pack.weight = weight;
  pack.m_size = static_cast<int>(p.in_channels);
  pack.m_pad = m_pad;
  pack.in_channels = static_cast<int>(p.in_channels);
  pack.kernel = k;
  pack.stride = s;
  pack.transpose = true;
  pack.channels = static_cast<int>(p.out_channels);
  pack.channel_pad = channel_pad;

  GatherParams params{};
  set_epilogue(params, epilogue);
  params.dest = x.raw_data();
  params.dest_bf16 = x.dtype() == DType::bf16;
  params.m_size = static_cast<int>(p.in_channels);
  params.batch = static_cast<int>(p.batch);
  params.source_channels = static_cast<int>(p.out_channels);
  params.source_h = static_cast<int>(p.out_height);
  params.source_w = static_cast<int>(p.out_width);
  params.dest_h = static_cast<int>(p.height);
  params.dest_w = static_cast<int>(p.width);
  params.source_scale = 1;
  params.dest_scale = s;
  params.channel_pad = channel_pad;

  // Destination pixel (h, w) = (ph + s*u, pw + s*v) receives the taps
  // i = i0 + s*ti with i0 = (ph + p) mod s, from source row
  // (h + p - i)/s = u + (ph + p - i0)/s - ti; likewise for columns.
  int part_count = 0;
  long long offset = 0;
  for (int ph = 0; ph < s; ++ph)
    for (int pw = 0; pw < s; ++pw) {
      const int grid_h = ph < p.height ? static_cast<int>(ceil_div(p.height - ph, s)) : 0;
      const int grid_w = pw < p.width ? static_cast<int>(ceil_div(p.width - pw, s)) : 0;
      if (grid_h == 0 || grid_w == 0) continue;
      const int i0 = (ph + pad) % s, j0 = (pw + pad) % s;
      const int taps_h = i0 < k ? (k - i0 + s - 1) / s : 0, taps_w = j0 < k ? (k - j0 + s - 1) / s : 0;
      const int k_size = (tap_major ? channel_pad : static_cast<int>(p.out_channels)) * taps_h * taps_w;
      const int k_stride = static_cast<int>(round_up(k_size, kTapAlign));
      GatherPart& part = params.parts[part_count];
      part.k_size = k_size;
      part.k_stride = k_stride;
      part.taps_h = std::max(taps_h, 1);  // a phase without taps has k_size 0; avoid dividing by 0
      part.taps_w = std::max(taps_w, 1);
      part.tap_step = -1;
      part.grid_h = grid_h;
      part.grid_w = grid_w;
      part.source_row0 = (ph + pad - i0) / s;
      part.source_col0 = (pw + pad - j0) / s;
      part.dest_row0 = ph;
      part.dest_col0 = pw;
      part.a_offset = offset;
      pack.parts[part_count] = {k_size, k_stride, part.taps_h, part.taps_w, i0, j0, offset};
      offset += static_cast<long long>(m_pad) * k_stride;
      ++part_count;
    }
  if (part_count == 0) return;
  params.a =
      pack_weight(ctx, pack, part_count, std::max(offset, 1LL), false, choice.bf16, scratch.backward_data_weight);
  params.part_count = part_count;
  params.source = gather_source(ctx, choice, y, scratch.backward_data_source, scratch.backward_data_source_f32);
  run_gather(ctx, params, scratch.backward_data_sums, choice.wgmma);
}

}  // namespace plexus::layers::implicit_gemm

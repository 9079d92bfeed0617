#pragma once
// NCHW -> NHWC copies (and bf16 channel rows, below) for the implicit-GEMM
// engine. With channels innermost, the channels of one pixel and kernel tap
// are contiguous, so the engine gathers them 16 bytes (4 f32) per cp.async
// instead of one element per copy (in NCHW they lie H*W apart).
// Source is the element of the NCHW tensor: float, or BFloat16 where the
// activation is stored in bf16 (read at 2 bytes per element and widened
// exactly, so the copy holds the same values as from an f32 tensor of them).
// Instantiated for both in nhwc_layout.cu.
#include <cstdint>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// destination[n, q, c] = c < channels ? source[n, c, q] : 0   for q < plane, c < channel_stride
// source is [batch, channels, plane] (NCHW with plane = H*W); destination is
// [batch, plane, channel_stride], channel_stride >= channels (the padding is zero).
template <class Source>
void nchw_to_nhwc_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t plane, std::int64_t channel_stride, float* destination);

// The same copy with every value rounded to bf16 (nearest even), stored as its
// 16-bit pattern: the operand of BF16 tensor-core products, half the bytes.
template <class Source>
void nchw_to_nhwc_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t plane, std::int64_t channel_stride, std::uint16_t* destination);

// Channel rows in bf16: row c holds channel c of every pixel of the batch in
// order, rounded to bf16 (nearest even), then zeros up to row_stride:
//   destination[c, n*plane + q] = bf16(source[n, c, q])   for n < batch, q < plane
//   destination[c, k]            = 0                        for batch*plane <= k < row_stride
// The weight gradient's A operand (pixels contiguous across images, so a
// tile of K never straddles an image and every row is 16-byte aligned when
// row_stride is a multiple of 8).
template <class Source>
void nchw_to_channel_rows_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                                    std::int64_t plane, std::int64_t row_stride, std::uint16_t* destination);

}  // namespace plexus::layers

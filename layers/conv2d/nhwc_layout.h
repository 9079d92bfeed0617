#pragma once
// NCHW -> NHWC copies for the implicit-GEMM engine. With channels innermost,
// the channels of one pixel and kernel tap are contiguous, so the engine
// gathers them 16 bytes (4 f32) per cp.async instead of one element per copy
// (in NCHW they lie H*W apart).
#include <cstdint>

#include "plexus/context.h"

namespace plexus::layers {

// destination[n, q, c] = c < channels ? source[n, c, q] : 0   for q < plane, c < channel_stride
// source is [batch, channels, plane] (NCHW with plane = H*W); destination is
// [batch, plane, channel_stride], channel_stride >= channels (the padding is zero).
void nchw_to_nhwc_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t plane, std::int64_t channel_stride, float* destination);

// The same copy with every value rounded to bf16 (nearest even), stored as its
// 16-bit pattern: the operand of BF16 tensor-core products, half the bytes.
void nchw_to_nhwc_bf16_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t plane, std::int64_t channel_stride, std::uint16_t* destination);

}  // namespace plexus::layers

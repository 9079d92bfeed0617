#pragma once
// Stride-phase copies for the Hopper weight gradient. A convolution with
// stride s meets, along one output row, input pixels s apart; split by phase,
//   destination[a*s + b][n][c][h'][w'] = X[n, c, s*h' + a, s*w' + b]
//   (zero where s*h' + a >= H, s*w' + b >= W, or w' >= ceil(W / s)),
// they are contiguous, as a tensor-memory-access (TMA) box needs them. X is
// [batch, channels, H, W]; the destination is [s*s, batch, channels,
// phase_height, row_pitch] with phase_height = ceil(H / s) and row_pitch >=
// ceil(W / s) (padding columns are zero). With s = 1 it is a copy of X with
// rows padded to row_pitch.
#include <cstdint>

#include "plexus/context.h"

namespace plexus::layers {

void nchw_to_phases_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                         std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                         float* destination);

// The same copy with every value rounded to bf16 (nearest even), stored as its 16-bit pattern.
void nchw_to_phases_bf16_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                              std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                              std::uint16_t* destination);

}  // namespace plexus::layers

#pragma once
// Operand copies for the Hopper weight gradient (implicit_gemm_wgmma_weight_grad.cu),
// whose tensor-memory-access (TMA) boxes need, for every kernel tap, the
// pixels of an output row contiguous and starting 16-byte aligned.
// Source is the element of X or Y: float, or BFloat16 where the activation is
// stored in bf16 (read at 2 bytes per element and widened exactly).
// Instantiated for both in weight_grad_layout.cu.
#include <cstdint>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// X split by stride phase. A convolution with stride s meets, along one
// output row, input pixels s apart; split by phase,
//   destination[a*s + b][n][c][h'][w'] = X[n, c, s*h' + a, s*w' + b]
//   (zero where s*h' + a >= H, s*w' + b >= W, or w' >= ceil(W / s)),
// they are contiguous. X is [batch, channels, H, W]; the destination is
// [s*s, batch, channels, ceil(H / s), row_pitch], row_pitch >= ceil(W / s)
// (padding columns are zero). With s = 1 it is X with rows padded to row_pitch. Strides 1 to 4.
template <class Source>
void nchw_to_phases_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                         std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                         float* destination);

// Y with its rows shifted right by first_shift, first_shift + 1, ...:
//   destination[copy][n][c][h][u] = Y[n, c, h, u - (first_shift + copy)]
//   (zero where that column is outside [0, W)), u < row_pitch.
// Y is [batch, channels, H, W]; the destination is [copies, batch, channels, H, row_pitch].
template <class Source>
void shifted_rows_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t height, std::int64_t width, int first_shift, int copies, std::int64_t row_pitch,
                       float* destination);

// The same copies with every value rounded to bf16 (nearest even), stored as its 16-bit pattern.
template <class Source>
void nchw_to_phases_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                              std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                              std::uint16_t* destination);
template <class Source>
void shifted_rows_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t height, std::int64_t width, int first_shift, int copies,
                            std::int64_t row_pitch, std::uint16_t* destination);

}  // namespace plexus::layers

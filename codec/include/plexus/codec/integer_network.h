#pragma once
// An integer network (Ballé, Johnston, Minnen, "Integer networks for data
// compression", ICLR 2019): a chain of (transposed) convolutions evaluated
// in integer arithmetic only, so that the encoder and the decoder compute
// bit-identical outputs on any CPU or GPU. The scale hyperprior uses one to
// turn the hyper-latent z_hat into the index, per element of y, of the
// Gaussian coding table (plexus/codec/gaussian_tables.h) that codes it.
//
// Every value is an integer; q_l[c] stands for the real activation
// q_l[c] * a_l[c] of the float network (a_l[c] the calibrated step of
// channel c of layer l's input; a_0 = 1, the input is z_hat itself).
// Layer l, with weights V [int16] and bias B [int64] in the accumulator's
// scale w_l[o] (the float weight W = V * w_l[o] / a_l[c], bias b = B * w_l[o]):
//   acc[o, Y, X] = B[o] + sum_{c, i, j} V[.., i, j] q_l[c, y(i), x(j)]   (int64, exact)
// with the taps of Conv2d or ConvTranspose2d (PyTorch geometry, below). A
// hidden layer's ReLU, rescale to the next step and clamp, in integers:
//   q_{l+1}[o] = 0                                               if acc <= 0
//              = min((acc * M[o] + 2^(S[o]-1)) >> S[o], 32767)    otherwise
// (M[o] / 2^S[o] ~ w_l[o] / a_{l+1}[o]; for S[o] = 0 no rounding term). The
// last layer's accumulator maps to a table index by integer thresholds:
//   index[o, Y, X] = #{ i < levels - 1 : acc[o, Y, X] > T[o, i] },
//   T[o, i] = floor(scale_table[i] / w_last[o]),
// i.e. the first table scale >= the predicted scale max(acc * w_last, 0),
// as CompressAI's GaussianConditional.build_indexes does in floating point.
// The input is clamped to [-32767, 32767] first. check() bounds every
// parameter so that no sum or product leaves int64 (|acc| < 2^47, M < 2^16).
//
// Taps: ConvTranspose2d (weight [C, O, k, k]) adds V[c, o, i, j] x[c, a, b] to
// output (a*s - p + i, b*s - p + j); output side (H - 1)s - 2p + k + output_padding.
// Conv2d (weight [O, C, k, k]) reads x[c, Y*s - p + i, X*s - p + j]; side
// (H + 2p - k)/s + 1. Both are evaluated as a gather per output element.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/tensor.h"

namespace plexus::codec {

inline constexpr std::int32_t kIntegerWeightMax = 32767;      // |V| <= 2^15 - 1
inline constexpr std::int32_t kIntegerActivationMax = 32767;  // 0 <= q <= 2^15 - 1; inputs in +-this
inline constexpr std::int64_t kIntegerMultiplierLimit = std::int64_t(1) << 16;  // 0 < M < 2^16
inline constexpr std::int64_t kIntegerBiasLimit = std::int64_t(1) << 46;        // |B| < 2^46
inline constexpr std::int64_t kIntegerTapLimit = std::int64_t(1) << 16;         // C * k * k

struct IntegerConvLayer {
  bool transposed = true;
  std::int32_t in_channels = 0, out_channels = 0;
  std::int32_t kernel = 1, stride = 1, padding = 0, output_padding = 0;
  std::vector<std::int32_t> weight;      // V, [C, O, k, k] transposed, [O, C, k, k] otherwise
  std::vector<std::int64_t> bias;        // B, [O]
  std::vector<std::int64_t> multiplier;  // M, [O]; hidden layers only (empty for the last)
  std::vector<std::int32_t> shift;       // S, [O] in [0, 62]; hidden layers only

  // The output side for an input side (throws ShapeError when not positive).
  std::int64_t output_side(std::int64_t input_side) const;
};

struct IntegerNetwork {
  std::vector<IntegerConvLayer> layers;
  std::int32_t levels = 0;               // entries of the scale table
  std::vector<std::int64_t> thresholds;  // T, [O_last, levels - 1], each row non-decreasing

  std::int32_t in_channels() const { return layers.empty() ? 0 : layers.front().in_channels; }
  std::int32_t out_channels() const { return layers.empty() ? 0 : layers.back().out_channels; }
  // [O_last, H', W'] for an input [C, height, width].
  Shape output_shape(std::int64_t height, std::int64_t width) const;
};

// Throws IoError starting with `who` when any rule above is broken (layer
// chaining, sizes, value ranges, multipliers, shifts, thresholds).
void check_network(const IntegerNetwork& network, const std::string& who);

// The table index of every element of the output, [O_last, H', W'] row-major,
// for an integer input [C, height, width] (row-major). The result is the same
// on every device. CUDA throws DeviceError in a build without it.
std::vector<std::int32_t> scale_indices(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t height, std::int64_t width, Device device = Device::cpu());
// The last layer's accumulators, [O_last, H', W'] (CPU; tests and calibration reports).
std::vector<std::int64_t> last_accumulators(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                            std::int64_t height, std::int64_t width);

}  // namespace plexus::codec

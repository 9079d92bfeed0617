#pragma once
// From a trained float network to an IntegerNetwork (integer_network.h):
// post-training quantisation with calibrated activation steps.
//
// Calibration: the float network is evaluated in f64 on a few inputs (the
// hyper-latents z_hat of some images) and the largest ReLU output of every
// hidden channel is kept (ActivationRanges). Quantisation, per layer l:
//   a_0[c] = 1 (the input is integer); a_l[c] = headroom * R_l[c] / 32767,
//     R_l[c] the calibrated maximum (a channel never seen active takes its
//     layer's largest R; a layer never active takes 1), so activations up to
//     headroom times the largest seen are represented, larger ones clamp;
//   w_l[o] = max(max_{c, taps} |W a_l[c]| / 32767, |b[o]| / 2^45), or 1 when
//     both are 0: V = round(W a_l[c] / w_l[o]), B = round(b[o] / w_l[o]);
//   hidden layers: M[o] / 2^S[o] = w_l[o] / a_{l+1}[o] with M in [2^15, 2^16)
//     (S clamped to [0, 62]; M then rounded into [1, 2^16));
//   last layer: T[o, i] = floor(scale_table[i] / w_last[o]).
// quantize_network is exact in this sense: every step is one IEEE-754 f64
// operation with a correctly rounded result (products, quotients, max,
// nearbyint, floor, frexp, ldexp; no sums, so neither summation order nor FMA
// contraction can enter; the file is compiled with -ffp-contract=off), so
// the same weights, ranges and scale table give the same integers on every
// machine. The calibration (float_forward's sums) is not: it runs once, and
// its ranges are stored with the model.
#include <cstdint>
#include <vector>

#include "plexus/codec/integer_network.h"

namespace plexus::codec {

inline constexpr double kDefaultActivationHeadroom = 2.0;

// One float layer, in the same layouts as IntegerConvLayer.
struct FloatConvLayer {
  bool transposed = true;
  std::int32_t in_channels = 0, out_channels = 0;
  std::int32_t kernel = 1, stride = 1, padding = 0, output_padding = 0;
  std::vector<double> weight, bias;
};

struct ActivationRanges {
  std::vector<std::vector<double>> maxima;  // [hidden layer][its output channel]
  std::int64_t samples = 0;                 // inputs observed
};

// The float network (every hidden layer followed by ReLU) on an integer
// input [C, height, width], in f64: the last layer's output (before any
// ReLU), [O_last, H', W']. `ranges`, when given, is raised to cover every
// hidden ReLU output seen (and sized on first use).
std::vector<double> float_forward(const std::vector<FloatConvLayer>& layers, const std::vector<std::int32_t>& input,
                                  std::int64_t height, std::int64_t width, ActivationRanges* ranges = nullptr);

// Throws ConfigError when the layers do not chain, ranges do not fit them,
// a value is not finite, or the scale table is not positive and increasing.
// `output_step`, when given, receives w_last[o]: the last accumulator times
// it is the float network's last output.
IntegerNetwork quantize_network(const std::vector<FloatConvLayer>& layers, const ActivationRanges& ranges,
                                const std::vector<double>& scale_table,
                                double headroom = kDefaultActivationHeadroom,
                                std::vector<double>* output_step = nullptr);

}  // namespace plexus::codec

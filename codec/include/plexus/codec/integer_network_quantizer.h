#pragma once
// From a trained float network to an IntegerNetwork (integer_network.h):
// post-training quantisation with calibrated activation steps.
//
// The float network has the integer network's graph (FloatNode mirrors
// IntegerNode; a rescale node is the activation function: ReLU, LeakyReLU
// or none). Calibration: it is evaluated in f64 on a few inputs (the
// hyper-latents z_hat of some images) and the largest |output| of every
// channel of every rescale node is kept (ActivationRanges). Quantisation,
// tensor by tensor (steps as in integer_network.h):
//   the input: a[c] = 1 (it is integer);
//   a rescale's output: a[c] = headroom * R[c] / 32767, R[c] the calibrated
//     maximum (a channel never seen active takes its node's largest R; a
//     node never active takes 1), so activations up to headroom times the
//     largest seen are represented, larger ones clamp; M / 2^S = w[c] / a[c]
//     with M in [2^15, 2^16) (S clamped to [0, 62]; M then rounded into
//     [1, 2^16)), N = nearbyint(slope * M-ratio * 2^S) (N = M for no activation);
//   a convolution's output: w[o] = max(max_{c, taps} |W a[c]| / 32767, |b[o]| / 2^45),
//     or 1 when both are 0: V = round(W a[c] / w[o]), B = round(b[o] / w[o]);
//   concat, slice and checkerboard_mask: the steps of their inputs' channels;
//   input, tanh and add: 2^-16 (fixed point); a tanh's table index
//     M / 2^S = w[c] 2^10, its table T[i] = nearbyint(2^16 scale t[i]) from
//     the stored t[i] = tanh(i / 2^10) (FloatNetwork::tanh_table);
//   the scales (step u): T[c, i] = floor(scale_table[i] / u[c]);
//   the means: K / 2^R = u[c] * 2^16, chosen as M above.
// quantize_network is exact in this sense: every step is one IEEE-754 f64
// operation with a correctly rounded result (products, quotients, max,
// nearbyint, floor, frexp, ldexp; no sums, so neither summation order nor FMA
// contraction can enter; the file is compiled with -ffp-contract=off), so
// the same weights, ranges and scale table give the same integers on every
// machine. The calibration (float_forward's sums) is not: it runs once, and
// its ranges are stored with the model, as is the tanh table.
#include <cstdint>
#include <vector>

#include "plexus/codec/integer_network.h"

namespace plexus::codec {

inline constexpr double kDefaultActivationHeadroom = 2.0;

// One float convolution, in the same layouts as IntegerConvLayer.
struct FloatConvLayer {
  bool transposed = true;
  std::int32_t in_channels = 0, out_channels = 0;
  std::int32_t kernel = 1, stride = 1, padding = 0, output_padding = 0;
  // The weights in f32, as a model stores them (f64 would double the memory
  // of a large entropy model at load); every product with them is in f64.
  std::vector<float> weight;
  std::vector<double> bias;
};

struct FloatNode {
  IntegerOp op = IntegerOp::convolution;
  std::vector<std::int32_t> inputs;   // tensor numbers, as IntegerNode's
  FloatConvLayer conv;                // convolution
  double negative_slope = 0;          // rescale: y = x for x > 0, slope * x otherwise (ReLU 0, none 1)
  double scale = 1;                   // tanh: y = scale tanh(x)
  std::int32_t begin = 0, count = 0;  // slice; count: an input's channels
  std::int32_t parity = 0;            // checkerboard_mask: the positions kept, (Y + X) mod 2 = parity
};

struct FloatNetwork {
  std::int32_t in_channels = 0;
  std::vector<FloatNode> nodes;
  std::int32_t scales = 0;
  std::int32_t means = -1;         // -1: no means
  std::int32_t decoded = -1;       // the decoded latent, with input nodes
  std::vector<double> tanh_table;  // tanh(i / 2^10), i = 0, 1, ...: needed with tanh nodes
  std::int32_t rescales() const;   // rescale nodes, each with its ActivationRanges entry
  // The channels of every tensor (ConfigError when the nodes do not fit together).
  std::vector<std::int32_t> channels() const;
  // As IntegerNetwork::groups.
  std::vector<std::int32_t> groups() const;
};

struct ActivationRanges {
  std::vector<std::vector<double>> maxima;  // [rescale node, in order][channel]: the largest |output|
  std::int64_t samples = 0;                 // inputs observed
};

struct FloatOutputs {
  std::vector<double> scales, means;  // [C, H', W'] each; means empty without
};

// The float network on an integer input [C, height, width] (clamped to
// +-32767 as the integer network's), in f64, evaluated as
// IntegerNetworkRunner evaluates the integer one: group by group, each
// tensor when first needed. `ranges`, when given, is raised to cover every
// rescale output computed (and sized on first use). ConfigError when the
// nodes do not fit together.
class FloatEvaluation {
 public:
  FloatEvaluation(const FloatNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                  std::int64_t width, ActivationRanges* ranges = nullptr);
  ~FloatEvaluation();
  const std::vector<std::int32_t>& groups() const { return groups_; }
  // The scales and means of group k, [C_k, H', W'].
  FloatOutputs outputs(std::int32_t group);
  // Group k's rounded latent (the float network's values, clamped to +-2^15);
  // setting it again forgets every tensor computed from it.
  void set_input(std::int32_t group, std::vector<double> values);
  std::vector<double> values(std::int32_t tensor, std::int32_t begin, std::int32_t count);

 private:
  const std::vector<double>& compute(std::int32_t tensor);
  const FloatNetwork& network_;
  ActivationRanges* ranges_;
  std::vector<std::int32_t> groups_, channels_, inputs_, rescale_number_;
  std::vector<std::pair<std::int64_t, std::int64_t>> sides_;
  std::vector<std::vector<double>> values_;
  std::vector<bool> ready_;
};

// Every scale and mean at once, of a network without input nodes.
FloatOutputs float_forward(const FloatNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                           std::int64_t width, ActivationRanges* ranges = nullptr);

// Throws ConfigError when the nodes do not fit together, ranges do not fit
// them, a value is not finite, or the scale table is not positive and
// increasing. `steps`, when given, receives every tensor's per-channel step
// (the scales' u: an output value times it is the float network's). Takes
// the network by value and frees each convolution's f64 weights once they
// are quantised, so a caller that moves its network in never holds both
// forms of a large model's weights at once.
IntegerNetwork quantize_network(FloatNetwork network, const ActivationRanges& ranges,
                                const std::vector<double>& scale_table, double headroom = kDefaultActivationHeadroom,
                                std::vector<std::vector<double>>* steps = nullptr);

}  // namespace plexus::codec

#pragma once
// An integer network (Ballé, Johnston, Minnen, "Integer networks for data
// compression", ICLR 2019): a small graph of convolutions, activations and
// channel concatenations and slices evaluated in integer arithmetic only, so
// that the encoder and the decoder compute bit-identical outputs on any CPU
// or GPU. A hyperprior codec runs one to turn the hyper-latent z_hat into,
// per element of the latent y, the index of the Gaussian coding table
// (plexus/codec/gaussian_tables.h) that codes it and, for a mean-scale
// hyperprior, its mean as a fixed-point integer.
//
// A channel-conditional model (Minnen & Singh 2020) codes its latent in
// groups of channels (slices), and the scales and means of a slice depend on
// the slices decoded before it: the network then has one extra input per
// slice, that slice's rounded latent, and is evaluated slice by slice
// (IntegerNetworkRunner below). A checkerboard context model's network has
// one input, the decoded anchors, given twice: all 0 (the anchors' pass),
// then the anchors' values (the other positions' pass).
//
// Tensors are numbered: 0 is the input, n + 1 the output of node n; a node
// reads only lower-numbered tensors. Each is [C, H, W] row-major, of one of
// three kinds:
//  - activations q, |q| <= 32767, standing for q[c] * a[c] of the float
//    network (a[c] the calibrated step of channel c; the input is z_hat
//    itself, a = 1, clamped to +-32767 first);
//  - accumulators acc, standing for acc[c] * w[c];
//  - fixed-point values v, |v| <= 2^31, standing for v * 2^-16: accumulators
//    whose step is 2^-16 in every channel (a slice's rounded latent, a
//    latent residual prediction, their sum).
// The nodes:
//  convolution (activation -> accumulator), weights V and bias B in the
//  accumulator's scale (the float weight W = V * w[o] / a[c], bias b = B * w[o]):
//    acc[o, Y, X] = B[o] + sum_{c, i, j} V[.., i, j] q[c, y(i), x(j)]   (int64, exact)
//  with the taps of Conv2d or ConvTranspose2d (PyTorch geometry, below);
//  rescale (accumulator -> activation): the activation function (ReLU,
//  LeakyReLU or none) and the move to the next step, in integers:
//    q[o] =  min((acc * M[o] + r) >> S[o], 32767)      if acc > 0
//         = -min((-acc * N[o] + r) >> S[o], 32767)     otherwise
//  (r = 2^(S-1), 0 for S = 0; M / 2^S ~ w[o] / a'[o], N / 2^S ~ slope * w[o] / a'[o]:
//  N = 0 for ReLU, N = M with no activation function);
//  concat (inputs of one size, channels in input order; activations join
//  only activations, fixed-point only fixed-point, else an accumulator) and
//  slice (channels [begin, begin + count)) move values without changing them;
//  input (fixed point, `count` channels of the latent's size): latent group
//  k's rounded values symbol * 2^16 + mean, the k-th input node in node
//  order, given by the caller and clamped to +-2^31;
//  tanh (accumulator -> fixed point), scale * tanh(acc * w) from a table
//  T (T[i] ~ 2^16 scale tanh(i / 2^10), stored with the model, so that no
//  machine's tanh enters):
//    v = sign(acc) T[min((|acc| M[o] + r) >> S[o], L - 1)]   (M / 2^S ~ w[o] 2^10);
//  add (fixed point + fixed point -> fixed point): the sum, clamped to +-2^31;
//  checkerboard_mask (any kind, kept): v[c, Y, X] unchanged where
//  (Y + X) mod 2 = parity, 0 elsewhere (CheckerboardMask; 0 is a value of
//  every kind), the masks of a checkerboard context model.
// The outputs, read from any tensor (values v, step u[c]); for a
// channel-conditional model the scales and means are the concatenations of
// the slices' and are read slice by slice:
//  scales: index[c, Y, X] = #{ i < levels - 1 : v > T[c, i] },
//    T[c, i] = floor(scale_table[i] / u[c]),
//  the first table scale >= the predicted scale max(v * u, 0), as CompressAI's
//  GaussianConditional.build_indexes does in floating point;
//  means (a mean-scale hyperprior; same shape as the scales):
//    mean[c, Y, X] = sign(v) min((|v| K[c] + r) >> R[c], 2^31)   in units of 2^-16
//  (K / 2^R ~ u[c] * 2^16; r as above), so the decoded latent
//  y_hat = symbol + mean * 2^-16 is the same number everywhere;
//  decoded (a channel-conditional model: what the synthesis reads, fixed
//  point, the latent's channels).
// check_network bounds every parameter so that no sum or product leaves
// int64 (|acc| < 2^47, multipliers < 2^16).
//
// Evaluation: a convolution is a product of f64 matrices (im2col and GEMM,
// BLAS on the CPU, cuBLAS on CUDA): every product |V q| < 2^30 and every
// partial sum < 2^47 is an integer that f64 holds exactly, so the result
// is the exact integer sum whatever order or blocking the library picks.
//
// Taps: ConvTranspose2d (weight [C, O, k, k]) adds V[c, o, i, j] x[c, a, b] to
// output (a*s - p + i, b*s - p + j); output side (H - 1)s - 2p + k + output_padding.
// Conv2d (weight [O, C, k, k]) reads x[c, Y*s - p + i, X*s - p + j]; side
// (H + 2p - k)/s + 1. Both are evaluated as a gather per output element.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/tensor.h"

namespace plexus::codec {

inline constexpr std::int32_t kIntegerWeightMax = 32767;                        // |V| <= 2^15 - 1
inline constexpr std::int32_t kIntegerActivationMax = 32767;                    // |q| <= 2^15 - 1; inputs clamped to it
inline constexpr std::int64_t kIntegerMultiplierLimit = std::int64_t(1) << 16;  // 0 <= M, N, K < 2^16
inline constexpr std::int64_t kIntegerBiasLimit = std::int64_t(1) << 46;        // |B| < 2^46
inline constexpr std::int64_t kIntegerTapLimit = std::int64_t(1) << 16;         // C * k * k
inline constexpr int kMeanFractionBits = 16;                                    // means in units of 2^-16
inline constexpr std::int64_t kFixedPointMax = std::int64_t(1) << 31;           // |fixed-point value| <= 2^31
inline constexpr int kTanhTableBits = 10;                                       // T[i] at i / 2^10
inline constexpr std::int32_t kMaxTanhTable = 1 << 16;                          // entries of a tanh table

enum class IntegerOp : std::int32_t {
  convolution = 1,
  rescale = 2,
  concat = 3,
  slice = 4,
  input = 5,
  tanh = 6,
  add = 7,
  checkerboard_mask = 8
};
const char* integer_op_name(IntegerOp op);

struct IntegerConvLayer {
  bool transposed = true;
  std::int32_t in_channels = 0, out_channels = 0;
  std::int32_t kernel = 1, stride = 1, padding = 0, output_padding = 0;
  std::vector<std::int32_t> weight;  // V, [C, O, k, k] transposed, [O, C, k, k] otherwise
  std::vector<std::int64_t> bias;    // B, [O]

  // The output side for an input side (throws ShapeError when not positive).
  std::int64_t output_side(std::int64_t input_side) const;
};

struct IntegerNode {
  IntegerOp op = IntegerOp::convolution;
  std::vector<std::int32_t> inputs;  // tensor numbers; one, two for add, any for concat, none for input
  IntegerConvLayer conv;             // convolution
  // rescale, per channel: M, N and S; tanh: M and S of the table index
  std::vector<std::int64_t> multiplier, negative_multiplier;
  std::vector<std::int32_t> shift;
  std::int32_t begin = 0, count = 0;  // slice; count: an input's channels
  std::vector<std::int64_t> table;    // tanh: T, in units of 2^-16
  std::int32_t parity = 0;            // checkerboard_mask: the positions kept, (Y + X) mod 2 = parity
};

struct IntegerNetwork {
  std::int32_t in_channels = 0;
  std::vector<IntegerNode> nodes;
  std::int32_t scales = 0;                    // the tensor the table indices come from
  std::int32_t levels = 0;                    // entries of the scale table
  std::vector<std::int64_t> thresholds;       // T, [C_scales, levels - 1], each row non-decreasing
  std::int32_t means = -1;                    // the tensor of the means, or -1 without
  std::vector<std::int64_t> mean_multiplier;  // K, [C_scales]
  std::vector<std::int32_t> mean_shift;       // R, [C_scales]
  std::int32_t decoded = -1;                  // the decoded latent (fixed point), or -1 without input nodes

  bool has_means() const { return means >= 0; }
  // The latent groups (slices) coded one after the other: the channels of
  // each input node in order; one group of all scale channels without input nodes.
  std::vector<std::int32_t> groups() const;
  std::int32_t tensors() const { return static_cast<std::int32_t>(nodes.size()) + 1; }
  // The channels of every tensor (the network must pass check_network).
  std::vector<std::int32_t> channels() const;
  std::int32_t out_channels() const { return channels()[static_cast<std::size_t>(scales)]; }
  // [C_scales, H', W'] for an input [C, height, width] (ShapeError when the
  // sizes do not work out: a side below 1, a concat of unequal sizes). Input
  // nodes are of the scales' size.
  Shape output_shape(std::int64_t height, std::int64_t width) const;
};

// Throws IoError starting with `who` when any rule above is broken (node
// order, kinds, channels, value ranges, multipliers, shifts, thresholds).
void check_network(const IntegerNetwork& network, const std::string& who);

// What the network gives for an input: per element of the scales tensor,
// [C, H', W'] row-major, the table index and (with means) the mean.
struct IntegerOutputs {
  Shape shape;  // [C, H', W']
  std::vector<std::int32_t> indices;
  std::vector<std::int64_t> means;  // units of 2^-16; empty without means
};

// A network (that passed check_network; quantize_network's do) prepared on a
// device, its weights kept there between images, evaluated one image at a
// time and, for a channel-conditional model, slice by slice: start() gives
// the hyper-latent, outputs(k) computes group k's indices and means (only
// what they need), set_input(k) gives group k's rounded latent. The
// results are the same on every device. CUDA throws DeviceError in a build
// without it.
class IntegerNetworkRunner {
 public:
  IntegerNetworkRunner(IntegerNetwork network, Device device);
  ~IntegerNetworkRunner();
  IntegerNetworkRunner(const IntegerNetworkRunner&) = delete;
  IntegerNetworkRunner& operator=(const IntegerNetworkRunner&) = delete;

  const IntegerNetwork& network() const { return network_; }
  const std::vector<std::int32_t>& groups() const { return groups_; }
  // A new image: the hyper-latent [C, height, width] (row-major); ShapeError
  // when the sizes do not work out.
  void start(const std::vector<std::int32_t>& input, std::int64_t height, std::int64_t width);
  // The indices and means of group k, [C_k, H', W'].
  IntegerOutputs outputs(std::int32_t group);
  // Group k's rounded latent, symbol * 2^16 + mean, [C_k, H', W'] (a
  // network with input nodes only). Setting it again (a checkerboard's
  // second pass) forgets every tensor computed from it.
  void set_input(std::int32_t group, const std::vector<std::int64_t>& values);
  // Channels [begin, begin + count) of a tensor (the decoded latent, tests).
  std::vector<std::int64_t> values(std::int32_t tensor, std::int32_t begin, std::int32_t count);

  class Backend;  // the device's kernels and the current image's tensors

 private:
  struct State;                       // the current image's tensor sides and which tensors are computed
  void compute(std::int32_t tensor);  // and every tensor it needs
  IntegerNetwork network_;
  std::vector<std::int32_t> groups_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<State> state_;
};

// For an integer input [C, height, width] (row-major) of a network without
// input nodes: every index and mean at once.
IntegerOutputs run_network(const IntegerNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                           std::int64_t width, Device device = Device::cpu());
// The values of one tensor, [C, H', W'] row-major (CPU; tests and
// calibration reports), of a network without input nodes.
std::vector<std::int64_t> tensor_values(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t height, std::int64_t width, std::int32_t tensor);

}  // namespace plexus::codec

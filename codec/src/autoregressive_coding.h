#pragma once
// The autoregressive latent codec (Minnen, Ballé, Toderici, "Joint
// autoregressive and hierarchical priors for learned image compression",
// NeurIPS 2018): the scales and means of the latent at a position come from
// the hyper-latent and, through a context convolution with a raster-scan
// mask "A", from the latent already decoded at the positions before it. The
// integer network (plexus/codec/integer_network.h) of such a model has one
// input node, the rounded latent symbol * 2^16 + mean; this file evaluates
// the part of it computed from that input at a few positions at a time, so
// that the latent is coded position after position with the exact integers
// the whole network gives (the tests check it against IntegerNetworkRunner).
//
// The wavefront. Through a causal convolution of kernel k = 2r + 1 (every
// tap at the centre and after it in raster order 0), the parameters at
// (h, w) read the latent at (h - dh, w + dw) with 1 <= dh <= r and |dw| <= r,
// or dh = 0 and -r <= dw <= -1. With the step t = a h + w, such a neighbour
// lies in step t - a dh + dw <= t - a + r (or t + dw < t): for a = r + 1
// every neighbour is in an earlier step, so the positions of one step, (h,
// t - a h) for every h, read only earlier steps and are computed together.
// a = r + 1 is the least such slope (a = r would leave (h - 1, w + r) in step
// t). For mbt2018's 5x5 context, a = 3: t = 3h + w, 3(H - 1) + W steps.
// Both ends code the positions in this order (docs/bitstream.md): steps in
// increasing t, the positions of a step in increasing h, the channels of a
// position in increasing c.
//
// What the network must be (autoregressive_problem says what is not): one
// input node, which is also the decoded latent; every node computed from it
// is pointwise (rescale, tanh, add, concat, slice, checkerboard mask, or a
// 1x1 convolution of stride 1 without padding) or a causal convolution (an
// odd kernel k, stride 1, padding k / 2, not transposed, every weight at the
// centre tap and after it 0); and the scales and means do not read the
// input at their own position (they read it through a causal convolution).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/codec/integer_network.h"
#include "plexus/tensor.h"

namespace plexus::codec {

// Why `network` cannot be coded autoregressively, naming the node; empty when it can.
std::string autoregressive_problem(const IntegerNetwork& network);
// The slope a = r + 1 of the widest causal convolution computed from the input (1 without one).
std::int32_t wavefront_slope(const IntegerNetwork& network);
// The positions h * width + w of each step t = 0 .. a (height - 1) + width - 1, each in increasing h.
std::vector<std::vector<std::int64_t>> wavefront_steps(std::int64_t height, std::int64_t width, std::int32_t slope);

// The float network of an autoregressive model (one input node, which is
// the decoded latent, and no checkerboard mask), told from a checkerboard's
// and a channel-conditional model's (two or more input nodes).
template <typename Network>
bool is_autoregressive_network(const Network& network) {
  std::int32_t inputs = 0, input = -1;
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    if (network.nodes[n].op == IntegerOp::checkerboard_mask) return false;
    if (network.nodes[n].op == IntegerOp::input) ++inputs, input = static_cast<std::int32_t>(n + 1);
  }
  return inputs == 1 && network.decoded == input;
}

// What the devices share: which tensors are computed from the input, in
// node order, and which are held whole for the image (those, the input, and
// the tensors not computed from the input that they read).
struct AutoregressivePlan {
  std::int32_t input = 0;
  // The tensors computed from the input, in node order: those that read it
  // at their own position (computed once the position is decoded), and the
  // others (computed before its parameters are read).
  std::vector<std::int32_t> after_input, before_outputs;
  std::vector<bool> held;  // [tensor]
  std::vector<std::int32_t> channels;
  // Per causal or 1x1 convolution (by tensor): the taps (i * k + j) with a
  // weight other than 0, the only ones evaluated.
  std::vector<std::vector<std::int32_t>> taps;
};

// An autoregressive model's integer network on a device, one image at a
// time. ConfigError from the constructor when autoregressive_problem finds
// one; CUDA throws DeviceError in a build without it.
class AutoregressiveRunner {
 public:
  AutoregressiveRunner(const IntegerNetwork& network, Device device);
  ~AutoregressiveRunner();
  AutoregressiveRunner(const AutoregressiveRunner&) = delete;
  AutoregressiveRunner& operator=(const AutoregressiveRunner&) = delete;

  std::int32_t slope() const { return slope_; }
  std::int32_t channels() const;  // of the latent
  // A new image: the tensors the latent's part reads that are not computed
  // from the latent, from `runner` (started with the image's hyper-latent),
  // of a latent height x width; every tensor computed from the latent 0.
  void start(IntegerNetworkRunner& runner, std::int64_t height, std::int64_t width);
  // The table indices and means of every channel at `positions` (h * width +
  // w, each of whose positions before it are set): element k * C + c for the
  // k-th position and channel c. shape is {positions, C}.
  IntegerOutputs outputs(const std::vector<std::int64_t>& positions);
  // The rounded latent symbol * 2^16 + mean at `positions` (element k * C + c), clamped to +-2^31.
  void set(const std::vector<std::int64_t>& positions, const std::vector<std::int64_t>& rounded);
  // Frees the image's tensors (until the next start).
  void finish();
  // The bytes of the tensors held per latent position (8 per channel of each held tensor).
  std::uint64_t bytes_per_position() const;

  // The device's kernels and the image's tensors (autoregressive_coding.cpp, .cu).
  class Backend {
   public:
    virtual ~Backend() = default;
    // A new image: every held tensor [C, height * width], 0.
    virtual void reset(std::int64_t height, std::int64_t width) = 0;
    // A whole held tensor not computed from the latent, [C, height * width].
    virtual void set_whole(std::int32_t tensor, const std::vector<std::int64_t>& values) = 0;
    // The positions the calls below work on.
    virtual void use_positions(const std::vector<std::int64_t>& positions) = 0;
    // The input's values there (element k * C + c, clamped).
    virtual void set_input(const std::vector<std::int64_t>& values) = 0;
    // Tensor `tensor` there, from its inputs (there, or before it for a causal convolution).
    virtual void compute(std::int32_t tensor) = 0;
    // The indices and means there (element k * C + c).
    virtual IntegerOutputs outputs() = 0;
  };

 private:
  IntegerNetwork network_;
  AutoregressivePlan plan_;
  std::int32_t slope_ = 1;
  void use(const std::vector<std::int64_t>& positions);
  std::int64_t height_ = 0, width_ = 0;
  std::vector<std::int64_t> positions_;  // the backend's current positions
  std::unique_ptr<Backend> backend_;
};

std::unique_ptr<AutoregressiveRunner::Backend> make_autoregressive_cpu(const IntegerNetwork& network,
                                                                       const AutoregressivePlan& plan);
#if PLEXUS_WITH_CUDA
std::unique_ptr<AutoregressiveRunner::Backend> make_autoregressive_cuda(const IntegerNetwork& network,
                                                                        const AutoregressivePlan& plan, int device);
#endif

}  // namespace plexus::codec

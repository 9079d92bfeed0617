#include "autoregressive_coding.h"

#include <Eigen/Core>

#include <algorithm>

#include "integer_arithmetic.h"
#include "network_structure.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

std::string node_name(std::int32_t tensor, const IntegerNode& node) {
  return "node " + std::to_string(tensor - 1) + " (" + integer_op_name(node.op) + ")";
}

// Whether every weight at tap `first` and after it (raster order) is 0.
bool zero_from_tap(const IntegerConvLayer& conv, std::int32_t first) {
  const std::size_t taps = static_cast<std::size_t>(conv.kernel) * conv.kernel;
  for (std::size_t n = 0; n < conv.weight.size(); ++n)
    if (static_cast<std::int32_t>(n % taps) >= first && conv.weight[n] != 0) return false;
  return true;
}

// The plan of a network that can be coded autoregressively, or the problem
// (naming the node) when it cannot.
struct Analysis {
  std::string problem;
  AutoregressivePlan plan;
  std::int32_t slope = 1;
};

Analysis analyse(const IntegerNetwork& network) {
  Analysis result;
  AutoregressivePlan& plan = result.plan;
  auto fail = [&](const std::string& problem) {
    result.problem = problem;
    return result;
  };
  const std::vector<std::int32_t> inputs = input_tensors(network);
  if (inputs.size() != 1)
    return fail("it has " + std::to_string(inputs.size()) +
                " input nodes; an autoregressive network has one, the rounded latent");
  plan.input = inputs[0];
  if (network.decoded != plan.input) return fail("its decoded latent is not its input, the rounded latent");
  if (!network.has_means()) return fail("it gives no means");
  plan.channels = network.channels();
  const std::size_t tensors = plan.channels.size();
  std::vector<bool> dynamic(tensors, false), immediate(tensors, false);
  plan.held.assign(tensors, false);
  plan.taps.assign(tensors, {});
  dynamic[static_cast<std::size_t>(plan.input)] = immediate[static_cast<std::size_t>(plan.input)] = true;
  plan.held[static_cast<std::size_t>(plan.input)] = true;
  for (std::size_t n = 0; n < network.nodes.size(); ++n) {
    const IntegerNode& node = network.nodes[n];
    const std::int32_t t = static_cast<std::int32_t>(n + 1);
    bool reads_latent = false, reads_here = false;
    for (std::int32_t input : node.inputs) {
      reads_latent = reads_latent || dynamic[static_cast<std::size_t>(input)];
      reads_here = reads_here || immediate[static_cast<std::size_t>(input)];
    }
    if (!reads_latent) continue;
    if (node.op == IntegerOp::convolution) {
      const IntegerConvLayer& conv = node.conv;
      const bool pointwise = conv.kernel == 1 && conv.padding == 0;
      const bool centred = conv.kernel % 2 == 1 && conv.padding == conv.kernel / 2;
      if (conv.transposed || conv.stride != 1 || !(pointwise || centred))
        return fail(node_name(t, node) + " reads the latent but is not a 1x1 convolution or a stride-1 convolution " +
                    "of an odd kernel and padding kernel / 2 (it is " + (conv.transposed ? "transposed, " : "") +
                    "kernel " + std::to_string(conv.kernel) + ", stride " + std::to_string(conv.stride) + ", padding " +
                    std::to_string(conv.padding) + ")");
      if (!pointwise) {
        if (!zero_from_tap(conv, (conv.kernel * conv.kernel - 1) / 2))
          return fail(node_name(t, node) +
                      " reads the latent with weights at or after its centre tap (raster order); the context "
                      "convolution needs mask \"A\"");
        reads_here = false;
        result.slope = std::max(result.slope, conv.padding + 1);
      }
      const std::int32_t taps = conv.kernel * conv.kernel;
      for (std::int32_t tap = 0; tap < taps; ++tap) {
        bool used = false;
        for (std::size_t w = static_cast<std::size_t>(tap); w < conv.weight.size() && !used;
             w += static_cast<std::size_t>(taps))
          used = conv.weight[w] != 0;
        if (used) plan.taps[static_cast<std::size_t>(t)].push_back(tap);
      }
    }
    dynamic[static_cast<std::size_t>(t)] = true;
    immediate[static_cast<std::size_t>(t)] = reads_here;
    (reads_here ? plan.after_input : plan.before_outputs).push_back(t);
    plan.held[static_cast<std::size_t>(t)] = true;
    for (std::int32_t input : node.inputs) plan.held[static_cast<std::size_t>(input)] = true;
  }
  for (std::int32_t output : {network.scales, network.means}) {
    if (immediate[static_cast<std::size_t>(output)])
      return fail(std::string("its ") + (output == network.scales ? "scales" : "means") +
                  " read the latent at their own position (not only through a causal convolution)");
    plan.held[static_cast<std::size_t>(output)] = true;
  }
  return result;
}

// ---- The CPU backend ----

class CpuBackend final : public AutoregressiveRunner::Backend {
 public:
  CpuBackend(const IntegerNetwork& network, const AutoregressivePlan& plan) : network_(network), plan_(plan) {
    // Each convolution computed from the latent as the f64 matrix [O, C * taps] of its used taps: every
    // product and partial sum is an integer below 2^47, exact in f64 (integer_network.h).
    weights_.resize(plan.channels.size());
    for (std::int32_t t : plan.before_outputs) prepare(t);
    for (std::int32_t t : plan.after_input) prepare(t);
  }

  void reset(std::int64_t height, std::int64_t width) override {
    height_ = height;
    width_ = width;
    values_.assign(plan_.channels.size(), {});
    for (std::size_t t = 0; t < values_.size(); ++t)
      if (plan_.held[t]) values_[t].assign(static_cast<std::size_t>(plan_.channels[t] * height * width), 0);
  }

  void set_whole(std::int32_t tensor, const std::vector<std::int64_t>& values) override {
    values_[static_cast<std::size_t>(tensor)] = values;
  }

  void use_positions(const std::vector<std::int64_t>& positions) override { positions_ = positions; }

  void set_input(const std::vector<std::int64_t>& values) override {
    const std::int64_t channels = plan_.channels[static_cast<std::size_t>(plan_.input)];
    for (std::size_t k = 0; k < positions_.size(); ++k)
      for (std::int64_t c = 0; c < channels; ++c)
        at(plan_.input, c, positions_[k]) = arithmetic::clamp_fixed(values[k * channels + c]);
  }

  void compute(std::int32_t tensor) override {
    const IntegerNode& node = network_.nodes[static_cast<std::size_t>(tensor - 1)];
    const std::int64_t channels = plan_.channels[static_cast<std::size_t>(tensor)];
    const std::int32_t first = node.inputs.empty() ? 0 : node.inputs[0];
    for (std::int64_t p : positions_) {
      switch (node.op) {
        case IntegerOp::convolution:
          break;  // below, for every position at once
        case IntegerOp::rescale:
          for (std::int64_t c = 0; c < channels; ++c)
            at(tensor, c, p) =
                arithmetic::rescale(at(first, c, p), node.multiplier[c], node.negative_multiplier[c], node.shift[c]);
          break;
        case IntegerOp::tanh:
          for (std::int64_t c = 0; c < channels; ++c)
            at(tensor, c, p) = arithmetic::table_tanh(at(first, c, p), node.multiplier[c], node.shift[c],
                                                      node.table.data(), static_cast<std::int32_t>(node.table.size()));
          break;
        case IntegerOp::add:
          for (std::int64_t c = 0; c < channels; ++c)
            at(tensor, c, p) = arithmetic::clamp_fixed(at(first, c, p) + at(node.inputs[1], c, p));
          break;
        case IntegerOp::checkerboard_mask:
          for (std::int64_t c = 0; c < channels; ++c)
            at(tensor, c, p) = arithmetic::checkerboard_kept(p / width_, p % width_, node.parity) ? at(first, c, p) : 0;
          break;
        case IntegerOp::concat: {
          std::int64_t c = 0;
          for (std::int32_t input : node.inputs)
            for (std::int64_t i = 0; i < plan_.channels[static_cast<std::size_t>(input)]; ++i)
              at(tensor, c++, p) = at(input, i, p);
          break;
        }
        case IntegerOp::slice:
          for (std::int64_t c = 0; c < channels; ++c) at(tensor, c, p) = at(first, node.begin + c, p);
          break;
        case IntegerOp::input:
          break;
      }
    }
    if (node.op == IntegerOp::convolution) convolve(tensor, node);
  }

  IntegerOutputs outputs() override {
    const std::int64_t channels = plan_.channels[static_cast<std::size_t>(network_.scales)];
    const std::int32_t levels = network_.levels - 1;
    IntegerOutputs out;
    out.shape = {static_cast<std::int64_t>(positions_.size()), channels};
    out.indices.resize(positions_.size() * static_cast<std::size_t>(channels));
    out.means.resize(out.indices.size());
    for (std::size_t k = 0; k < positions_.size(); ++k)
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::size_t e = k * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c);
        out.indices[e] = arithmetic::table_index(at(network_.scales, c, positions_[k]),
                                                 network_.thresholds.data() + c * levels, levels);
        out.means[e] = arithmetic::fixed_mean(at(network_.means, c, positions_[k]), network_.mean_multiplier[c],
                                              network_.mean_shift[c]);
      }
    return out;
  }

 private:
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  void prepare(std::int32_t tensor) {
    const IntegerNode& node = network_.nodes[static_cast<std::size_t>(tensor - 1)];
    if (node.op != IntegerOp::convolution) return;
    const IntegerConvLayer& conv = node.conv;
    const std::vector<std::int32_t>& taps = plan_.taps[static_cast<std::size_t>(tensor)];
    const std::int64_t k2 = std::int64_t(conv.kernel) * conv.kernel, used = static_cast<std::int64_t>(taps.size());
    Matrix& w = weights_[static_cast<std::size_t>(tensor)];
    w.resize(conv.out_channels, conv.in_channels * used);
    for (std::int64_t o = 0; o < conv.out_channels; ++o)
      for (std::int64_t c = 0; c < conv.in_channels; ++c)
        for (std::int64_t u = 0; u < used; ++u)
          w(o, c * used + u) = conv.weight[static_cast<std::size_t>((o * conv.in_channels + c) * k2 + taps[u])];
  }

  // acc[o, p] = B[o] + sum_{c, used taps} V[o, c, tap] q[c, tap's position], for every position at once.
  void convolve(std::int32_t tensor, const IntegerNode& node) {
    const IntegerConvLayer& conv = node.conv;
    const std::vector<std::int32_t>& taps = plan_.taps[static_cast<std::size_t>(tensor)];
    const std::int64_t used = static_cast<std::int64_t>(taps.size()),
                       count = static_cast<std::int64_t>(positions_.size());
    Matrix columns = Matrix::Zero(conv.in_channels * used, count);
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t p = positions_[static_cast<std::size_t>(k)];
      for (std::int64_t u = 0; u < used; ++u) {
        const std::int64_t source =
            arithmetic::same_size_tap(p / width_, p % width_, taps[u], conv.kernel, conv.padding, height_, width_);
        if (source < 0) continue;
        for (std::int64_t c = 0; c < conv.in_channels; ++c)
          columns(c * used + u, k) = static_cast<double>(at(node.inputs[0], c, source));
      }
    }
    const Matrix product = weights_[static_cast<std::size_t>(tensor)] * columns;
    for (std::int64_t o = 0; o < conv.out_channels; ++o)
      for (std::int64_t k = 0; k < count; ++k)
        at(tensor, o, positions_[static_cast<std::size_t>(k)]) =
            conv.bias[static_cast<std::size_t>(o)] + static_cast<std::int64_t>(product(o, k));
  }

  std::int64_t& at(std::int32_t tensor, std::int64_t channel, std::int64_t position) {
    return values_[static_cast<std::size_t>(tensor)][static_cast<std::size_t>(channel * height_ * width_ + position)];
  }

  const IntegerNetwork& network_;
  const AutoregressivePlan& plan_;
  std::vector<Matrix> weights_;
  std::int64_t height_ = 0, width_ = 0;
  std::vector<std::vector<std::int64_t>> values_;
  std::vector<std::int64_t> positions_;
};

}  // namespace

std::string autoregressive_problem(const IntegerNetwork& network) { return analyse(network).problem; }

std::int32_t wavefront_slope(const IntegerNetwork& network) { return analyse(network).slope; }

std::vector<std::vector<std::int64_t>> wavefront_steps(std::int64_t height, std::int64_t width, std::int32_t slope) {
  std::vector<std::vector<std::int64_t>> steps(static_cast<std::size_t>(slope * (height - 1) + width));
  for (std::int64_t h = 0; h < height; ++h)
    for (std::int64_t w = 0; w < width; ++w) steps[static_cast<std::size_t>(slope * h + w)].push_back(h * width + w);
  return steps;
}

std::unique_ptr<AutoregressiveRunner::Backend> make_autoregressive_cpu(const IntegerNetwork& network,
                                                                       const AutoregressivePlan& plan) {
  return std::make_unique<CpuBackend>(network, plan);
}

AutoregressiveRunner::AutoregressiveRunner(const IntegerNetwork& network, Device device) : network_(network) {
  Analysis analysis = analyse(network_);
  if (!analysis.problem.empty())
    throw ConfigError("integer network: cannot be coded autoregressively: " + analysis.problem);
  plan_ = std::move(analysis.plan);
  slope_ = analysis.slope;
#if PLEXUS_WITH_CUDA
  if (device.is_cuda()) {
    backend_ = make_autoregressive_cuda(network_, plan_, device.index);
    return;
  }
#else
  if (device.is_cuda()) throw DeviceError("autoregressive coding on CUDA: this Plexus was built without CUDA");
#endif
  backend_ = make_autoregressive_cpu(network_, plan_);
}

AutoregressiveRunner::~AutoregressiveRunner() = default;

std::int32_t AutoregressiveRunner::channels() const { return plan_.channels[static_cast<std::size_t>(plan_.input)]; }

void AutoregressiveRunner::start(IntegerNetworkRunner& runner, std::int64_t height, std::int64_t width) {
  if (height < 1 || width < 1)
    throw ShapeError("autoregressive coding: a latent of " + std::to_string(height) + "x" + std::to_string(width));
  height_ = height;
  width_ = width;
  positions_.clear();
  backend_->reset(height, width);
  std::vector<bool> dynamic(plan_.held.size(), false);
  dynamic[static_cast<std::size_t>(plan_.input)] = true;
  for (const std::vector<std::int32_t>* part : {&plan_.after_input, &plan_.before_outputs})
    for (std::int32_t t : *part) dynamic[static_cast<std::size_t>(t)] = true;
  for (std::size_t t = 0; t < plan_.held.size(); ++t) {
    if (!plan_.held[t] || dynamic[t]) continue;
    const std::int32_t tensor = static_cast<std::int32_t>(t);
    std::vector<std::int64_t> values = runner.values(tensor, 0, plan_.channels[t]);
    if (static_cast<std::int64_t>(values.size()) != plan_.channels[t] * height * width)
      throw ShapeError("autoregressive coding: tensor " + std::to_string(t) + " of the integer network has " +
                       std::to_string(values.size()) + " values, not the " + std::to_string(plan_.channels[t]) +
                       " channels of the " + std::to_string(height) + "x" + std::to_string(width) + " latent");
    backend_->set_whole(tensor, values);
  }
}

IntegerOutputs AutoregressiveRunner::outputs(const std::vector<std::int64_t>& positions) {
  for (std::int64_t p : positions)
    if (p < 0 || p >= height_ * width_)
      throw ShapeError("autoregressive coding: position " + std::to_string(p) + " outside the latent");
  // A latent narrower than the wavefront's slope has empty steps; a device launch of no blocks is an error.
  if (positions.empty()) return IntegerOutputs{{0, channels()}, {}, {}};
  use(positions);
  for (std::int32_t t : plan_.before_outputs) backend_->compute(t);
  return backend_->outputs();
}

void AutoregressiveRunner::set(const std::vector<std::int64_t>& positions, const std::vector<std::int64_t>& rounded) {
  if (rounded.size() != positions.size() * static_cast<std::size_t>(channels()))
    throw ShapeError("autoregressive coding: " + std::to_string(rounded.size()) + " latent values for " +
                     std::to_string(positions.size()) + " positions of " + std::to_string(channels()) + " channels");
  for (std::int64_t p : positions)
    if (p < 0 || p >= height_ * width_)
      throw ShapeError("autoregressive coding: position " + std::to_string(p) + " outside the latent");
  if (positions.empty()) return;
  use(positions);
  backend_->set_input(rounded);
  for (std::int32_t t : plan_.after_input) backend_->compute(t);
}

void AutoregressiveRunner::use(const std::vector<std::int64_t>& positions) {
  if (positions == positions_) return;  // a step's set after its outputs: given to the device once
  positions_ = positions;
  backend_->use_positions(positions);
}

void AutoregressiveRunner::finish() {
  backend_->reset(0, 0);
  height_ = width_ = 0;
  positions_.clear();
}

std::uint64_t AutoregressiveRunner::bytes_per_position() const {
  std::uint64_t bytes = 0;
  for (std::size_t t = 0; t < plan_.held.size(); ++t)
    if (plan_.held[t]) bytes += 8 * static_cast<std::uint64_t>(plan_.channels[t]);
  return bytes;
}

}  // namespace plexus::codec

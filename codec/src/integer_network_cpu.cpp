// The integer network's CPU backend (IntegerNetworkRunner::Backend, network_structure.h).
#include "cpu_convolution.h"
#include "integer_arithmetic.h"
#include "network_structure.h"

namespace plexus::codec {

namespace {

class CpuBackend final : public IntegerNetworkRunner::Backend {
 public:
  explicit CpuBackend(const IntegerNetwork& network) : network_(network) {}

  void reset(const std::vector<Side>& sides) override {
    sides_ = sides;
    tensors_.assign(sides.size(), {});
  }

  void set(std::int32_t tensor, const std::vector<std::int64_t>& values) override {
    tensors_[static_cast<std::size_t>(tensor)] = values;
  }

  void compute(std::int32_t tensor) override {
    const std::size_t t = static_cast<std::size_t>(tensor);
    const IntegerNode& node = network_.nodes[t - 1];
    const std::int64_t plane = sides_[t].first * sides_[t].second;
    auto input = [&](std::size_t k) -> const std::vector<std::int64_t>& {
      return tensors_[static_cast<std::size_t>(node.inputs[k])];
    };
    std::vector<std::int64_t> y;
    switch (node.op) {
      case IntegerOp::convolution:
        // The f64 weight matrix is made for the pass and freed after it: kept for
        // every layer, it would double the memory of a large model's network
        // (hundreds of megabytes), and making it costs one read of the weights,
        // against the product's one per output position.
        y = node.conv.transposed && node.conv.stride > 1
                ? cpu_transposed_convolution_by_phase(node.conv, weight_rows(node.conv), input(0),
                                                      sides_[static_cast<std::size_t>(node.inputs[0])], sides_[t])
                : cpu_convolution<std::int64_t>(node.conv, weight_rows(node.conv), input(0),
                                                sides_[static_cast<std::size_t>(node.inputs[0])], sides_[t]);
        break;
      case IntegerOp::rescale:
        y = input(0);
        for (std::size_t n = 0; n < y.size(); ++n) {
          const std::size_t c = n / static_cast<std::size_t>(plane);
          y[n] = arithmetic::rescale(y[n], node.multiplier[c], node.negative_multiplier[c], node.shift[c]);
        }
        break;
      case IntegerOp::tanh:
        y = input(0);
        for (std::size_t n = 0; n < y.size(); ++n) {
          const std::size_t c = n / static_cast<std::size_t>(plane);
          y[n] = arithmetic::table_tanh(y[n], node.multiplier[c], node.shift[c], node.table.data(),
                                        static_cast<std::int32_t>(node.table.size()));
        }
        break;
      case IntegerOp::add:
        y = input(0);
        for (std::size_t n = 0; n < y.size(); ++n) y[n] = arithmetic::clamp_fixed(y[n] + input(1)[n]);
        break;
      case IntegerOp::checkerboard_mask:
        y = input(0);
        for (std::size_t n = 0; n < y.size(); ++n) {
          const std::int64_t position = static_cast<std::int64_t>(n) % plane;
          if (!arithmetic::checkerboard_kept(position / sides_[t].second, position % sides_[t].second, node.parity))
            y[n] = 0;
        }
        break;
      case IntegerOp::concat:
        for (std::size_t k = 0; k < node.inputs.size(); ++k) y.insert(y.end(), input(k).begin(), input(k).end());
        break;
      case IntegerOp::slice:
        y.assign(input(0).begin() + node.begin * plane, input(0).begin() + (node.begin + node.count) * plane);
        break;
      case IntegerOp::input:
        throw ConfigError("integer network: tensor " + std::to_string(tensor) + " is an input, set, not computed");
    }
    tensors_[t] = std::move(y);
  }

  std::vector<std::int64_t> read(std::int32_t tensor, std::int64_t offset, std::int64_t count) override {
    const std::vector<std::int64_t>& values = tensors_[static_cast<std::size_t>(tensor)];
    return {values.begin() + offset, values.begin() + offset + count};
  }

  IntegerOutputs outputs(std::int32_t scales_tensor, std::int64_t offset, std::int32_t means_tensor,
                         std::int64_t means_offset, std::int64_t count, std::int32_t channel,
                         std::int64_t plane) override {
    IntegerOutputs out;
    const std::int32_t levels = network_.levels - 1;
    const std::int64_t* scales = tensors_[static_cast<std::size_t>(scales_tensor)].data() + offset;
    out.indices.resize(static_cast<std::size_t>(count));
    for (std::int64_t n = 0; n < count; ++n) {
      const std::int64_t c = channel + n / plane;
      out.indices[static_cast<std::size_t>(n)] =
          arithmetic::table_index(scales[n], network_.thresholds.data() + c * levels, levels);
    }
    if (means_tensor < 0) return out;
    const std::int64_t* means = tensors_[static_cast<std::size_t>(means_tensor)].data() + means_offset;
    out.means.resize(static_cast<std::size_t>(count));
    for (std::int64_t n = 0; n < count; ++n) {
      const std::size_t c = static_cast<std::size_t>(channel + n / plane);
      out.means[static_cast<std::size_t>(n)] =
          arithmetic::fixed_mean(means[n], network_.mean_multiplier[c], network_.mean_shift[c]);
    }
    return out;
  }

 private:
  const IntegerNetwork& network_;
  std::vector<Side> sides_;
  std::vector<std::vector<std::int64_t>> tensors_;
};

}  // namespace

std::unique_ptr<IntegerNetworkRunner::Backend> make_cpu_backend(const IntegerNetwork& network) {
  return std::make_unique<CpuBackend>(network);
}

}  // namespace plexus::codec

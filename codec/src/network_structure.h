#pragma once
// What the integer network and the float network it is quantised from
// (IntegerNetwork, FloatNetwork: nodes with op, inputs, conv, begin, count)
// share about their graph: the side of every tensor, and where a channel
// range of a tensor is computed; and the device backends that evaluate the
// integer network (IntegerNetworkRunner::Backend).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plexus/codec/integer_network.h"
#include "plexus/error.h"

namespace plexus::codec {

using Side = std::pair<std::int64_t, std::int64_t>;  // height, width

// A convolution's output side for an input side (ShapeError when below 1).
template <typename Conv>
std::int64_t conv_output_side(const Conv& layer, std::int64_t side) {
  const std::int64_t out = layer.transposed
                               ? (side - 1) * layer.stride - 2 * layer.padding + layer.kernel + layer.output_padding
                               : (side + 2 * layer.padding - layer.kernel) / layer.stride + 1;
  if (side < 1 || out < 1)
    throw ShapeError("integer network: a side of " + std::to_string(side) + " gives an output side of " +
                     std::to_string(out));
  return out;
}

// The sides of every tensor for an input of height x width. Input nodes
// take the side of the tensor `scales`: found by a first pass in which their
// side is unknown ({0, 0}) and a node joining tensors takes a known side.
template <typename Network>
std::vector<Side> network_sides(const Network& network, std::int64_t height, std::int64_t width) {
  constexpr Side kUnknown{0, 0};
  Side input_side = kUnknown;
  std::vector<Side> sides;
  for (int pass = 0; pass < 2; ++pass) {
    const bool final = pass == 1;
    sides = {{height, width}};
    for (std::size_t n = 0; n < network.nodes.size(); ++n) {
      const auto& node = network.nodes[n];
      Side side = node.op == IntegerOp::input ? input_side : sides[static_cast<std::size_t>(node.inputs[0])];
      if (node.op == IntegerOp::convolution && side != kUnknown)
        side = {conv_output_side(node.conv, side.first), conv_output_side(node.conv, side.second)};
      else
        for (std::int32_t input : node.inputs) {
          const Side other = sides[static_cast<std::size_t>(input)];
          if (side == kUnknown) side = other;
          if (other != side && (final || other != kUnknown))
            throw ShapeError("integer network: node " + std::to_string(n) + " (" + integer_op_name(node.op) +
                             ") joins tensors of different sizes");
        }
      sides.push_back(side);
    }
    input_side = sides[static_cast<std::size_t>(network.scales)];
    if (input_side == kUnknown)
      throw ShapeError("integer network: the size of the scales does not follow from the hyper-latent's");
  }
  return sides;
}

// The output positions of one im2col block of a CPU convolution (the
// integer network's and the float network's): at most 2^22 values (32 MB)
// so memory stays bounded whatever the image; about 64 blocks, at least 64
// positions each, so that many cores share an image. It depends on the
// sizes only, never on the thread count.
inline std::int64_t cpu_block_positions(std::int64_t positions, std::int64_t rows) {
  const std::int64_t largest = std::max<std::int64_t>(1, (std::int64_t(1) << 22) / rows);
  const std::int64_t wanted = std::max<std::int64_t>((positions + 63) / 64, 64);
  return std::max<std::int64_t>(1, std::min({wanted, largest, positions}));
}

// The weights of a convolution (IntegerConvLayer or FloatConvLayer) as the
// f64 matrix [O, C k k] of the GEMM out = W cols: row o, column
// (c * k + i) * k + j holds V[o, c, i, j], or V[c, o, i, j] for a
// transposed convolution.
template <typename Conv>
std::vector<double> weight_matrix(const Conv& layer) {
  const std::int64_t k2 = std::int64_t(layer.kernel) * layer.kernel, rows = layer.in_channels * k2;
  std::vector<double> matrix(static_cast<std::size_t>(layer.out_channels * rows));
  for (std::int64_t o = 0; o < layer.out_channels; ++o)
    for (std::int64_t c = 0; c < layer.in_channels; ++c)
      for (std::int64_t t = 0; t < k2; ++t)
        matrix[static_cast<std::size_t>(o * rows + c * k2 + t)] =
            static_cast<double>(layer.weight[static_cast<std::size_t>(
                layer.transposed ? (c * layer.out_channels + o) * k2 + t : (o * layer.in_channels + c) * k2 + t)]);
  return matrix;
}

// A channel range [begin, begin + count) of a tensor.
struct ChannelRange {
  std::int32_t tensor, begin, count;
};

// Where `range` is computed: followed through slices, and through concats
// whose one input holds it all, to the first tensor that is `ready` or
// computes it, so that one latent group's scales need only that group's nodes.
template <typename Network>
ChannelRange resolve_range(const Network& network, const std::vector<std::int32_t>& channels,
                           const std::vector<bool>& ready, ChannelRange range) {
  while (range.tensor > 0 && !ready[static_cast<std::size_t>(range.tensor)]) {
    const auto& node = network.nodes[static_cast<std::size_t>(range.tensor - 1)];
    if (node.op == IntegerOp::slice) {
      range = {node.inputs[0], range.begin + node.begin, range.count};
      continue;
    }
    if (node.op != IntegerOp::concat) break;
    std::int32_t offset = 0;
    bool inside = false;
    for (std::int32_t input : node.inputs) {
      const std::int32_t size = channels[static_cast<std::size_t>(input)];
      if (range.begin >= offset && range.begin + range.count <= offset + size) {
        range = {input, range.begin - offset, range.count};
        inside = true;
        break;
      }
      offset += size;
    }
    if (!inside) break;
  }
  return range;
}

// Marks every tensor computed from `tensor` (directly or not) as not
// `ready`, so that an input given again is read again.
template <typename Network>
void forget_dependents(const Network& network, std::int32_t tensor, std::vector<bool>& ready) {
  std::vector<bool> depends(network.nodes.size() + 1, false);
  depends[static_cast<std::size_t>(tensor)] = true;
  for (std::size_t n = static_cast<std::size_t>(tensor); n < network.nodes.size(); ++n)
    for (std::int32_t input : network.nodes[n].inputs)
      if (depends[static_cast<std::size_t>(input)]) {
        depends[n + 1] = true;
        ready[n + 1] = false;
      }
}

// The tensors of the input nodes, in node order (latent group k's is the k-th).
template <typename Network>
std::vector<std::int32_t> input_tensors(const Network& network) {
  std::vector<std::int32_t> tensors;
  for (std::size_t n = 0; n < network.nodes.size(); ++n)
    if (network.nodes[n].op == IntegerOp::input) tensors.push_back(static_cast<std::int32_t>(n + 1));
  return tensors;
}

// The sides of every tensor for a hyper-latent of height x width; input
// nodes are of the scales' size (ShapeError when sizes do not work out).
std::vector<Side> tensor_sides(const IntegerNetwork& network, std::int64_t height, std::int64_t width);

// What IntegerNetworkRunner (plexus/codec/integer_network.h) asks of a
// device: the network's parameters prepared there once, and one image's
// tensors, each computed when the runner first needs it. The CPU backend is
// integer_network_cpu.cpp, the CUDA one integer_network.cu; both evaluate
// integer_arithmetic.h's formulas, so they compute the same integers.

class IntegerNetworkRunner::Backend {
 public:
  virtual ~Backend() = default;
  // A new image of these tensor sides: every tensor is forgotten.
  virtual void reset(const std::vector<Side>& sides) = 0;
  // Tensor `tensor` is `values` (the hyper-latent, clamped; an input node's).
  virtual void set(std::int32_t tensor, const std::vector<std::int64_t>& values) = 0;
  // Computes tensor `tensor`, the output of node tensor - 1, whose inputs are computed.
  virtual void compute(std::int32_t tensor) = 0;
  // `count` values of a computed tensor from `offset`.
  virtual std::vector<std::int64_t> read(std::int32_t tensor, std::int64_t offset, std::int64_t count) = 0;
  // The table indices of `count` values of the scales tensor from `offset`,
  // whose first channel is channel `channel` of the network's scales, and
  // the means of as many values of `means_tensor` from `means_offset` (none when it is -1).
  virtual IntegerOutputs outputs(std::int32_t scales_tensor, std::int64_t offset, std::int32_t means_tensor,
                                 std::int64_t means_offset, std::int64_t count, std::int32_t channel,
                                 std::int64_t plane) = 0;
};

std::unique_ptr<IntegerNetworkRunner::Backend> make_cpu_backend(const IntegerNetwork& network);
#if PLEXUS_WITH_CUDA
std::unique_ptr<IntegerNetworkRunner::Backend> make_cuda_backend(const IntegerNetwork& network, int device);
#else
inline std::unique_ptr<IntegerNetworkRunner::Backend> make_cuda_backend(const IntegerNetwork&, int) {
  throw DeviceError("integer network on CUDA: this Plexus was built without CUDA");
}
#endif

}  // namespace plexus::codec

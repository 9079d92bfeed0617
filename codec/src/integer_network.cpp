#include "plexus/codec/integer_network.h"

#include <algorithm>

#include "integer_network_kernels.h"
#include "plexus/cpu_parallel.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

[[noreturn]] void fail(const std::string& who, const std::string& problem) {
  throw IoError(who + ": integer hyper-synthesis: " + problem);
}

std::string layer_name(std::size_t index) { return "layer " + std::to_string(index); }

void check_layer(const IntegerConvLayer& layer, bool last, std::size_t index, const std::string& who) {
  const std::string name = layer_name(index);
  if (layer.in_channels < 1 || layer.out_channels < 1 || layer.kernel < 1 || layer.stride < 1 ||
      layer.padding < 0 || layer.output_padding < 0 || layer.kernel > 64 || layer.stride > 64 ||
      layer.padding > 64 || (layer.transposed ? layer.output_padding >= layer.stride : layer.output_padding != 0))
    fail(who, name + " has an impossible geometry (channels " + std::to_string(layer.in_channels) + " -> " +
                  std::to_string(layer.out_channels) + ", kernel " + std::to_string(layer.kernel) + ", stride " +
                  std::to_string(layer.stride) + ", padding " + std::to_string(layer.padding) +
                  ", output padding " + std::to_string(layer.output_padding) + ")");
  const std::int64_t taps = std::int64_t(layer.in_channels) * layer.kernel * layer.kernel;
  if (taps > kIntegerTapLimit)
    fail(who, name + " sums " + std::to_string(taps) + " products per output, more than " +
                  std::to_string(kIntegerTapLimit));
  const std::size_t weights = static_cast<std::size_t>(taps) * static_cast<std::size_t>(layer.out_channels);
  if (layer.weight.size() != weights || layer.bias.size() != static_cast<std::size_t>(layer.out_channels))
    fail(who, name + " has " + std::to_string(layer.weight.size()) + " weights and " +
                  std::to_string(layer.bias.size()) + " biases, expected " + std::to_string(weights) + " and " +
                  std::to_string(layer.out_channels));
  for (std::int32_t v : layer.weight)
    if (v < -kIntegerWeightMax || v > kIntegerWeightMax)
      fail(who, name + " has a weight " + std::to_string(v) + " outside +-" + std::to_string(kIntegerWeightMax));
  for (std::int64_t b : layer.bias)
    if (b <= -kIntegerBiasLimit || b >= kIntegerBiasLimit)
      fail(who, name + " has a bias " + std::to_string(b) + " outside +-2^46");
  const std::size_t rescales = last ? 0 : static_cast<std::size_t>(layer.out_channels);
  if (layer.multiplier.size() != rescales || layer.shift.size() != rescales)
    fail(who, name + " has " + std::to_string(layer.multiplier.size()) + " multipliers and " +
                  std::to_string(layer.shift.size()) + " shifts, expected " + std::to_string(rescales));
  for (std::size_t o = 0; o < rescales; ++o) {
    if (layer.multiplier[o] < 1 || layer.multiplier[o] >= kIntegerMultiplierLimit)
      fail(who, name + " has a multiplier " + std::to_string(layer.multiplier[o]) + " outside [1, 2^16)");
    if (layer.shift[o] < 0 || layer.shift[o] > 62)
      fail(who, name + " has a shift " + std::to_string(layer.shift[o]) + " outside [0, 62]");
  }
}

// acc for output element (o, y, x) of `layer` on input q [C, height, width]: a
// gather over the taps that reach it (module comment). Exact in int64 under
// check_network's bounds, so the order of the sum does not matter.
std::int64_t accumulate(const IntegerConvLayer& layer, const std::int32_t* q, std::int64_t height, std::int64_t width,
                        std::int64_t o, std::int64_t y, std::int64_t x) {
  const std::int64_t k = layer.kernel, s = layer.stride, p = layer.padding;
  const std::int64_t channels = layer.in_channels, outs = layer.out_channels;
  std::int64_t acc = layer.bias[o];
  for (std::int64_t i = 0; i < k; ++i) {
    std::int64_t a;
    if (layer.transposed) {
      const std::int64_t t = y + p - i;
      if (t < 0 || t % s != 0) continue;
      a = t / s;
    } else {
      a = y * s - p + i;
    }
    if (a < 0 || a >= height) continue;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t b;
      if (layer.transposed) {
        const std::int64_t t = x + p - j;
        if (t < 0 || t % s != 0) continue;
        b = t / s;
      } else {
        b = x * s - p + j;
      }
      if (b < 0 || b >= width) continue;
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t v = layer.transposed ? layer.weight[((c * outs + o) * k + i) * k + j]
                                                : layer.weight[((o * channels + c) * k + i) * k + j];
        acc += v * q[(c * height + a) * width + b];
      }
    }
  }
  return acc;
}

std::int32_t rescale(std::int64_t acc, std::int64_t multiplier, std::int32_t shift) {
  if (acc <= 0) return 0;
  const std::int64_t rounding = shift > 0 ? std::int64_t(1) << (shift - 1) : 0;
  return static_cast<std::int32_t>(std::min<std::int64_t>((acc * multiplier + rounding) >> shift,
                                                          kIntegerActivationMax));
}

std::int32_t table_index(std::int64_t acc, const std::int64_t* thresholds, std::int32_t count) {
  std::int32_t index = 0;
  for (std::int32_t i = 0; i < count; ++i) index += acc > thresholds[i];
  return index;
}

void check_input(const IntegerNetwork& network, const std::vector<std::int32_t>& input, std::int64_t height,
                 std::int64_t width) {
  if (network.layers.empty()) throw ConfigError("integer hyper-synthesis: the network has no layers");
  if (height < 1 || width < 1 || static_cast<std::int64_t>(input.size()) != network.in_channels() * height * width)
    throw ShapeError("integer hyper-synthesis: an input of " + std::to_string(input.size()) + " values for [" +
                     std::to_string(network.in_channels()) + ", " + std::to_string(height) + ", " +
                     std::to_string(width) + "]");
}

// Runs every layer but the last; returns the last layer's input and its size.
std::vector<std::int32_t> hidden_layers(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t& height, std::int64_t& width) {
  std::vector<std::int32_t> q(input.size());
  for (std::size_t n = 0; n < input.size(); ++n)
    q[n] = std::clamp(input[n], -kIntegerActivationMax, kIntegerActivationMax);
  for (std::size_t l = 0; l + 1 < network.layers.size(); ++l) {
    const IntegerConvLayer& layer = network.layers[l];
    const std::int64_t out_height = layer.output_side(height), out_width = layer.output_side(width);
    std::vector<std::int32_t> next(static_cast<std::size_t>(layer.out_channels * out_height * out_width));
    parallel_for(layer.out_channels, [&](std::int64_t o) {
      for (std::int64_t y = 0; y < out_height; ++y)
        for (std::int64_t x = 0; x < out_width; ++x)
          next[(o * out_height + y) * out_width + x] =
              rescale(accumulate(layer, q.data(), height, width, o, y, x), layer.multiplier[o], layer.shift[o]);
    });
    q.swap(next);
    height = out_height;
    width = out_width;
  }
  return q;
}

}  // namespace

std::int64_t IntegerConvLayer::output_side(std::int64_t input_side) const {
  const std::int64_t side = transposed ? (input_side - 1) * stride - 2 * padding + kernel + output_padding
                                       : (input_side + 2 * padding - kernel) / stride + 1;
  if (input_side < 1 || side < 1)
    throw ShapeError("integer hyper-synthesis: a side of " + std::to_string(input_side) + " gives an output side of " +
                     std::to_string(side));
  return side;
}

Shape IntegerNetwork::output_shape(std::int64_t height, std::int64_t width) const {
  for (const IntegerConvLayer& layer : layers) {
    height = layer.output_side(height);
    width = layer.output_side(width);
  }
  return {out_channels(), height, width};
}

void check_network(const IntegerNetwork& network, const std::string& who) {
  if (network.layers.empty()) fail(who, "no layers");
  for (std::size_t l = 0; l < network.layers.size(); ++l) {
    check_layer(network.layers[l], l + 1 == network.layers.size(), l, who);
    if (l > 0 && network.layers[l].in_channels != network.layers[l - 1].out_channels)
      fail(who, layer_name(l) + " reads " + std::to_string(network.layers[l].in_channels) + " channels but " +
                    layer_name(l - 1) + " gives " + std::to_string(network.layers[l - 1].out_channels));
  }
  if (network.levels < 2 || network.levels > 1024)
    fail(who, "a scale table of " + std::to_string(network.levels) + " levels (2..1024 expected)");
  const std::size_t expected = static_cast<std::size_t>(network.out_channels()) * (network.levels - 1);
  if (network.thresholds.size() != expected)
    fail(who, std::to_string(network.thresholds.size()) + " thresholds, expected " + std::to_string(expected));
  for (std::size_t n = 0; n < expected; ++n)
    if (n % (network.levels - 1) != 0 && network.thresholds[n] < network.thresholds[n - 1])
      fail(who, "the thresholds of output channel " + std::to_string(n / (network.levels - 1)) + " decrease");
}

std::vector<std::int64_t> last_accumulators(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                            std::int64_t height, std::int64_t width) {
  check_input(network, input, height, width);
  const std::vector<std::int32_t> q = hidden_layers(network, input, height, width);
  const IntegerConvLayer& layer = network.layers.back();
  const std::int64_t out_height = layer.output_side(height), out_width = layer.output_side(width);
  std::vector<std::int64_t> acc(static_cast<std::size_t>(layer.out_channels * out_height * out_width));
  parallel_for(layer.out_channels, [&](std::int64_t o) {
    for (std::int64_t y = 0; y < out_height; ++y)
      for (std::int64_t x = 0; x < out_width; ++x)
        acc[(o * out_height + y) * out_width + x] = accumulate(layer, q.data(), height, width, o, y, x);
  });
  return acc;
}

std::vector<std::int32_t> scale_indices(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                        std::int64_t height, std::int64_t width, Device device) {
  check_input(network, input, height, width);
  if (device.is_cuda()) return scale_indices_cuda(network, input, height, width, device.index);
  const Shape shape = network.output_shape(height, width);
  const std::vector<std::int64_t> acc = last_accumulators(network, input, height, width);
  const std::int64_t plane = shape[1] * shape[2];
  const std::int32_t count = network.levels - 1;
  std::vector<std::int32_t> indices(acc.size());
  for (std::size_t n = 0; n < acc.size(); ++n)
    indices[n] = table_index(acc[n], network.thresholds.data() + (n / plane) * count, count);
  return indices;
}

}  // namespace plexus::codec

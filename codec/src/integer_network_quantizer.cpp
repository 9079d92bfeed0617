#include "plexus/codec/integer_network_quantizer.h"

#include <algorithm>
#include <cmath>

#include "plexus/error.h"

namespace plexus::codec {

namespace {

std::int64_t output_side(const FloatConvLayer& layer, std::int64_t side) {
  const std::int64_t out = layer.transposed
                               ? (side - 1) * layer.stride - 2 * layer.padding + layer.kernel + layer.output_padding
                               : (side + 2 * layer.padding - layer.kernel) / layer.stride + 1;
  if (out < 1) throw ShapeError("float hyper-synthesis: a side of " + std::to_string(side) + " gives " +
                                std::to_string(out));
  return out;
}

// y[o, Y, X] = b[o] + sum_{c, i, j} W x (the taps of integer_network.h), in f64.
std::vector<double> float_layer(const FloatConvLayer& layer, const std::vector<double>& x, std::int64_t height,
                                std::int64_t width, std::int64_t out_height, std::int64_t out_width) {
  const std::int64_t k = layer.kernel, s = layer.stride, p = layer.padding;
  const std::int64_t channels = layer.in_channels, outs = layer.out_channels;
  std::vector<double> y(static_cast<std::size_t>(outs * out_height * out_width));
  for (std::int64_t o = 0; o < outs; ++o)
    for (std::int64_t oy = 0; oy < out_height; ++oy)
      for (std::int64_t ox = 0; ox < out_width; ++ox) {
        double sum = layer.bias[o];
        for (std::int64_t i = 0; i < k; ++i)
          for (std::int64_t j = 0; j < k; ++j) {
            std::int64_t a = oy * s - p + i, b = ox * s - p + j;
            if (layer.transposed) {
              const std::int64_t ty = oy + p - i, tx = ox + p - j;
              if (ty < 0 || tx < 0 || ty % s != 0 || tx % s != 0) continue;
              a = ty / s;
              b = tx / s;
            }
            if (a < 0 || a >= height || b < 0 || b >= width) continue;
            for (std::int64_t c = 0; c < channels; ++c) {
              const double w = layer.transposed ? layer.weight[((c * outs + o) * k + i) * k + j]
                                                : layer.weight[((o * channels + c) * k + i) * k + j];
              sum += w * x[(c * height + a) * width + b];
            }
          }
        y[(o * out_height + oy) * out_width + ox] = sum;
      }
  return y;
}

void check_layers(const std::vector<FloatConvLayer>& layers) {
  if (layers.empty()) throw ConfigError("integer hyper-synthesis: no layers to quantise");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const FloatConvLayer& layer = layers[l];
    const std::size_t weights = static_cast<std::size_t>(layer.in_channels) * layer.out_channels * layer.kernel *
                                layer.kernel;
    const std::string name = "integer hyper-synthesis: layer " + std::to_string(l);
    if (layer.in_channels < 1 || layer.out_channels < 1 || layer.kernel < 1 || layer.stride < 1 ||
        layer.weight.size() != weights || layer.bias.size() != static_cast<std::size_t>(layer.out_channels))
      throw ConfigError(name + ": " + std::to_string(layer.weight.size()) + " weights and " +
                        std::to_string(layer.bias.size()) + " biases do not fit its shape");
    if (l > 0 && layer.in_channels != layers[l - 1].out_channels)
      throw ConfigError(name + " reads " + std::to_string(layer.in_channels) + " channels, but layer " +
                        std::to_string(l - 1) + " gives " + std::to_string(layers[l - 1].out_channels));
    for (const std::vector<double>* values : {&layer.weight, &layer.bias})
      for (double v : *values)
        if (!std::isfinite(v)) throw ConfigError(name + " has a weight or bias that is not finite");
  }
}

// The calibrated steps a_l[c] of the input of hidden layer l + 1.
std::vector<double> activation_steps(const std::vector<double>& maxima, double headroom) {
  double layer_max = 0;
  for (double m : maxima) layer_max = std::max(layer_max, m);
  if (!(layer_max > 0)) layer_max = 1;
  std::vector<double> steps(maxima.size());
  for (std::size_t c = 0; c < maxima.size(); ++c)
    steps[c] = headroom * (maxima[c] > 0 ? maxima[c] : layer_max) / kIntegerActivationMax;
  return steps;
}

// M, S with M / 2^S ~ ratio: M in [2^15, 2^16) when S fits [0, 62].
void rescale_for(double ratio, std::int64_t& multiplier, std::int32_t& shift) {
  int exponent = 0;
  std::frexp(ratio, &exponent);  // ratio = f 2^exponent, f in [0.5, 1)
  shift = std::clamp(16 - exponent, 0, 62);
  double m = std::nearbyint(std::ldexp(ratio, shift));
  if (m >= static_cast<double>(kIntegerMultiplierLimit) && shift > 0) m = std::nearbyint(std::ldexp(ratio, --shift));
  multiplier = static_cast<std::int64_t>(std::clamp(m, 1.0, static_cast<double>(kIntegerMultiplierLimit - 1)));
}

}  // namespace

std::vector<double> float_forward(const std::vector<FloatConvLayer>& layers, const std::vector<std::int32_t>& input,
                                  std::int64_t height, std::int64_t width, ActivationRanges* ranges) {
  check_layers(layers);
  if (static_cast<std::int64_t>(input.size()) != layers.front().in_channels * height * width)
    throw ShapeError("float hyper-synthesis: " + std::to_string(input.size()) + " input values for [" +
                     std::to_string(layers.front().in_channels) + ", " + std::to_string(height) + ", " +
                     std::to_string(width) + "]");
  if (ranges && ranges->maxima.empty())
    for (std::size_t l = 0; l + 1 < layers.size(); ++l) ranges->maxima.emplace_back(layers[l].out_channels, 0.0);
  std::vector<double> x(input.begin(), input.end());
  for (double& v : x) v = std::clamp(v, -double(kIntegerActivationMax), double(kIntegerActivationMax));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::int64_t out_height = output_side(layers[l], height), out_width = output_side(layers[l], width);
    x = float_layer(layers[l], x, height, width, out_height, out_width);
    height = out_height;
    width = out_width;
    if (l + 1 == layers.size()) break;
    const std::int64_t plane = height * width;
    for (std::size_t n = 0; n < x.size(); ++n) {
      x[n] = std::max(x[n], 0.0);
      if (ranges) {
        double& seen = ranges->maxima[l][n / plane];
        seen = std::max(seen, x[n]);
      }
    }
  }
  if (ranges) ++ranges->samples;
  return x;
}

IntegerNetwork quantize_network(const std::vector<FloatConvLayer>& layers, const ActivationRanges& ranges,
                                const std::vector<double>& scale_table, double headroom,
                                std::vector<double>* output_step) {
  check_layers(layers);
  if (ranges.maxima.size() + 1 != layers.size())
    throw ConfigError("integer hyper-synthesis: activation ranges for " + std::to_string(ranges.maxima.size()) +
                      " hidden layers, but the network has " + std::to_string(layers.size() - 1));
  for (std::size_t l = 0; l < ranges.maxima.size(); ++l)
    if (ranges.maxima[l].size() != static_cast<std::size_t>(layers[l].out_channels))
      throw ConfigError("integer hyper-synthesis: activation ranges of hidden layer " + std::to_string(l) +
                        " have " + std::to_string(ranges.maxima[l].size()) + " channels, the layer has " +
                        std::to_string(layers[l].out_channels));
  if (!(headroom >= 1) || !std::isfinite(headroom))
    throw ConfigError("integer hyper-synthesis: the activation headroom must be a finite value >= 1");
  if (scale_table.size() < 2 || scale_table.size() > 1024)
    throw ConfigError("integer hyper-synthesis: a scale table of " + std::to_string(scale_table.size()) +
                      " levels (2..1024 expected)");
  for (std::size_t i = 0; i < scale_table.size(); ++i)
    if (!(scale_table[i] > 0) || !std::isfinite(scale_table[i]) || (i > 0 && !(scale_table[i] > scale_table[i - 1])))
      throw ConfigError("integer hyper-synthesis: the scale table must be positive and increasing");

  IntegerNetwork network;
  network.levels = static_cast<std::int32_t>(scale_table.size());
  std::vector<double> input_steps(static_cast<std::size_t>(layers.front().in_channels), 1.0);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const FloatConvLayer& f = layers[l];
    const bool last = l + 1 == layers.size();
    IntegerConvLayer layer;
    layer.transposed = f.transposed;
    layer.in_channels = f.in_channels;
    layer.out_channels = f.out_channels;
    layer.kernel = f.kernel;
    layer.stride = f.stride;
    layer.padding = f.padding;
    layer.output_padding = f.output_padding;
    const std::int64_t k2 = std::int64_t(f.kernel) * f.kernel;
    // The step of input channel c of weight element n (layout-dependent).
    auto channel_of = [&](std::size_t n) {
      return f.transposed ? static_cast<std::int64_t>(n) / (f.out_channels * k2)
                          : static_cast<std::int64_t>(n) / k2 % f.in_channels;
    };
    auto output_of = [&](std::size_t n) {
      return f.transposed ? static_cast<std::int64_t>(n) / k2 % f.out_channels
                          : static_cast<std::int64_t>(n) / (f.in_channels * k2);
    };
    std::vector<double> largest(static_cast<std::size_t>(f.out_channels), 0.0);
    for (std::size_t n = 0; n < f.weight.size(); ++n) {
      double& m = largest[output_of(n)];
      m = std::max(m, std::abs(f.weight[n] * input_steps[channel_of(n)]));
    }
    std::vector<double> steps(static_cast<std::size_t>(f.out_channels));
    for (std::int64_t o = 0; o < f.out_channels; ++o) {
      const double step = std::max(largest[o] / kIntegerWeightMax, std::abs(f.bias[o]) / std::ldexp(1.0, 45));
      steps[o] = step > 0 ? step : 1.0;
      layer.bias.push_back(static_cast<std::int64_t>(std::nearbyint(f.bias[o] / steps[o])));
    }
    layer.weight.resize(f.weight.size());
    for (std::size_t n = 0; n < f.weight.size(); ++n)
      layer.weight[n] = static_cast<std::int32_t>(std::clamp(
          std::nearbyint(f.weight[n] * input_steps[channel_of(n)] / steps[output_of(n)]),
          -double(kIntegerWeightMax), double(kIntegerWeightMax)));
    if (!last) {
      const std::vector<double> next_steps = activation_steps(ranges.maxima[l], headroom);
      layer.multiplier.resize(steps.size());
      layer.shift.resize(steps.size());
      for (std::size_t o = 0; o < steps.size(); ++o) rescale_for(steps[o] / next_steps[o], layer.multiplier[o], layer.shift[o]);
      input_steps = next_steps;
    } else {
      const double limit = std::ldexp(1.0, 62);
      for (std::size_t o = 0; o < steps.size(); ++o)
        for (std::size_t i = 0; i + 1 < scale_table.size(); ++i)
          network.thresholds.push_back(
              static_cast<std::int64_t>(std::clamp(std::floor(scale_table[i] / steps[o]), -limit, limit)));
      if (output_step) *output_step = steps;
    }
    network.layers.push_back(std::move(layer));
  }
  check_network(network, "quantize_network");
  return network;
}

}  // namespace plexus::codec

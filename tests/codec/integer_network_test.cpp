// The integer network (plexus/codec/integer_network.h and
// integer_network_quantizer.h): against an independent f64 reference of the
// float network (the layers' scatter formulas, written here), the table
// index against the float path's index, the fixed-point means against the
// float means, the CPU's transposed convolutions by phase against one product
// over every tap, calibration, validation of stored parameters and graphs, and
// bit-identical indices and means on the CPU and CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cpu_convolution.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/integer_network.h"
#include "plexus/codec/integer_network_quantizer.h"
#include "plexus/context.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::codec {
namespace {

struct Sized {
  std::vector<double> values;
  std::int64_t channels, height, width;
};

// ConvTranspose2d as PyTorch defines it, scattering each input pixel:
// y[o, a*s - p + i, b*s - p + j] += W[c, o, i, j] x[c, a, b], plus bias.
Sized reference_transposed(const FloatConvLayer& l, const Sized& x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  Sized y{{},
          l.out_channels,
          (x.height - 1) * s - 2 * p + k + l.output_padding,
          (x.width - 1) * s - 2 * p + k + l.output_padding};
  y.values.assign(static_cast<std::size_t>(y.channels * y.height * y.width), 0.0);
  for (std::int64_t o = 0; o < y.channels; ++o)
    for (std::int64_t n = 0; n < y.height * y.width; ++n) y.values[o * y.height * y.width + n] = l.bias[o];
  for (std::int64_t c = 0; c < x.channels; ++c)
    for (std::int64_t a = 0; a < x.height; ++a)
      for (std::int64_t b = 0; b < x.width; ++b)
        for (std::int64_t o = 0; o < y.channels; ++o)
          for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t j = 0; j < k; ++j) {
              const std::int64_t Y = a * s - p + i, X = b * s - p + j;
              if (Y < 0 || Y >= y.height || X < 0 || X >= y.width) continue;
              y.values[(o * y.height + Y) * y.width + X] +=
                  l.weight[((c * y.channels + o) * k + i) * k + j] * x.values[(c * x.height + a) * x.width + b];
            }
  return y;
}

// Conv2d: y[o, Y, X] = b[o] + sum W[o, c, i, j] x[c, Y*s - p + i, X*s - p + j].
Sized reference_conv(const FloatConvLayer& l, const Sized& x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  Sized y{{}, l.out_channels, (x.height + 2 * p - k) / s + 1, (x.width + 2 * p - k) / s + 1};
  y.values.assign(static_cast<std::size_t>(y.channels * y.height * y.width), 0.0);
  for (std::int64_t o = 0; o < y.channels; ++o)
    for (std::int64_t Y = 0; Y < y.height; ++Y)
      for (std::int64_t X = 0; X < y.width; ++X) {
        double sum = l.bias[o];
        for (std::int64_t c = 0; c < x.channels; ++c)
          for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t j = 0; j < k; ++j) {
              const std::int64_t a = Y * s - p + i, b = X * s - p + j;
              if (a >= 0 && a < x.height && b >= 0 && b < x.width)
                sum += l.weight[((o * x.channels + c) * k + i) * k + j] * x.values[(c * x.height + a) * x.width + b];
            }
        y.values[(o * y.height + Y) * y.width + X] = sum;
      }
  return y;
}

// The float chain (an activation after every hidden layer: x for x > 0,
// slope * x otherwise); `maxima` collects each hidden layer's per-channel
// largest |output|.
Sized reference_network(const std::vector<FloatConvLayer>& layers, const std::vector<std::int32_t>& z,
                        std::int64_t height, std::int64_t width, std::vector<std::vector<double>>* maxima = nullptr,
                        double slope = 0) {
  Sized x{std::vector<double>(z.begin(), z.end()), layers.front().in_channels, height, width};
  if (maxima && maxima->empty())
    for (std::size_t l = 0; l + 1 < layers.size(); ++l) maxima->emplace_back(layers[l].out_channels, 0.0);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    x = layers[l].transposed ? reference_transposed(layers[l], x) : reference_conv(layers[l], x);
    if (l + 1 == layers.size()) break;
    for (std::size_t n = 0; n < x.values.size(); ++n) {
      if (x.values[n] < 0) x.values[n] *= slope;
      if (maxima) {
        double& m = (*maxima)[l][n / (x.height * x.width)];
        m = std::max(m, std::abs(x.values[n]));
      }
    }
  }
  return x;
}

// The chain as a FloatNetwork: each convolution but the last followed by a
// rescale of `slope`, the scales read from the last convolution.
FloatNetwork chain(const std::vector<FloatConvLayer>& layers, double slope = 0) {
  FloatNetwork network;
  network.in_channels = layers.front().in_channels;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    FloatNode conv;
    conv.op = IntegerOp::convolution;
    conv.inputs = {static_cast<std::int32_t>(network.nodes.size())};
    conv.conv = layers[l];
    network.nodes.push_back(conv);
    if (l + 1 == layers.size()) break;
    FloatNode act;
    act.op = IntegerOp::rescale;
    act.inputs = {static_cast<std::int32_t>(network.nodes.size())};
    act.negative_slope = slope;
    network.nodes.push_back(act);
  }
  network.scales = static_cast<std::int32_t>(network.nodes.size());
  return network;
}

// A mean-scale chain: the last layer's 2C outputs split into scales (first
// C) and means (last C), as mbt2018-mean's hyper-synthesis.
FloatNetwork mean_scale(const std::vector<FloatConvLayer>& layers, double slope) {
  FloatNetwork network = chain(layers, slope);
  const std::int32_t last = network.scales, half = layers.back().out_channels / 2;
  for (std::int32_t k = 0; k < 2; ++k) {
    FloatNode slice;
    slice.op = IntegerOp::slice;
    slice.inputs = {last};
    slice.begin = k * half;
    slice.count = half;
    network.nodes.push_back(slice);
  }
  network.scales = last + 1;
  network.means = last + 2;
  return network;
}

FloatConvLayer random_layer(std::mt19937& rng, bool transposed, int in, int out, int kernel, int stride, int padding,
                            int output_padding, double scale) {
  std::uniform_real_distribution<double> u(-scale, scale);
  FloatConvLayer l;
  l.transposed = transposed;
  l.in_channels = in;
  l.out_channels = out;
  l.kernel = kernel;
  l.stride = stride;
  l.padding = padding;
  l.output_padding = output_padding;
  for (int n = 0; n < in * out * kernel * kernel; ++n) l.weight.push_back(u(rng));
  for (int n = 0; n < out; ++n) l.bias.push_back(u(rng) * 0.5);
  return l;
}

// The shape of the bmshj2018 hyper-synthesis, narrower: convT 5x5/2, convT 5x5/2, convT 3x3/1.
std::vector<FloatConvLayer> hyper_synthesis(std::uint32_t seed, int channels = 6, int outputs = 5) {
  std::mt19937 rng(seed);
  return {random_layer(rng, true, 4, channels, 5, 2, 2, 1, 0.4),
          random_layer(rng, true, channels, channels, 5, 2, 2, 1, 0.3),
          random_layer(rng, true, channels, outputs, 3, 1, 1, 0, 0.4)};
}

std::vector<std::int32_t> random_latent(std::mt19937& rng, std::int64_t count, int range) {
  std::uniform_int_distribution<int> u(-range, range);
  std::vector<std::int32_t> z(static_cast<std::size_t>(count));
  for (auto& v : z) v = u(rng);
  return z;
}

// The float path's index: the first table scale >= max(scale, 0), as CompressAI's build_indexes.
std::int32_t float_index(double scale, const std::vector<double>& table) {
  std::int32_t index = 0;
  for (std::size_t i = 0; i + 1 < table.size(); ++i) index += scale > table[i];
  return index;
}

struct Calibrated {
  IntegerNetwork network;
  std::vector<std::vector<double>> steps;  // every tensor's
};

Calibrated calibrate(const FloatNetwork& network, std::uint32_t seed, int samples = 4) {
  std::mt19937 rng(seed);
  ActivationRanges ranges;
  for (int n = 0; n < samples; ++n) float_forward(network, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
  Calibrated result;
  result.network = quantize_network(network, ranges, log_scale_table(), kDefaultActivationHeadroom, &result.steps);
  return result;
}

double largest_magnitude(const std::vector<double>& values) {
  double largest = 0;
  for (double v : values) largest = std::max(largest, std::abs(v));
  return largest;
}

// A transposed layer of stride 2 or 3 computed phase by phase (the integer
// network's CPU path) gives exactly the integers of one product over every tap,
// the stride gaps' zeros included, for paddings 0 to 2 and odd sides.
TEST(IntegerNetwork, TransposedConvolutionsByPhaseEqualOneProductOverEveryTap) {
  std::mt19937 rng(58);
  std::uniform_int_distribution<std::int32_t> weights(-127, 127), values(-32767, 32767);
  int cases = 0;
  for (int stride = 2; stride <= 3; ++stride)
    for (int kernel : {3, 5})
      for (int padding = 0; padding <= 2; ++padding) {
        IntegerConvLayer layer;
        layer.transposed = true;
        layer.in_channels = 3;
        layer.out_channels = 4;
        layer.kernel = kernel;
        layer.stride = stride;
        layer.padding = padding;
        layer.output_padding = stride - 1;
        for (int n = 0; n < 3 * 4 * kernel * kernel; ++n) layer.weight.push_back(weights(rng));
        for (int n = 0; n < 4; ++n) layer.bias.push_back(values(rng) * 1000);
        const Side in{5, 7}, out{layer.output_side(in.first), layer.output_side(in.second)};
        std::vector<std::int64_t> x(static_cast<std::size_t>(3 * in.first * in.second));
        for (std::int64_t& v : x) v = values(rng);
        const RowMatrix weight = weight_rows(layer);
        const std::vector<std::int64_t> want = cpu_convolution<std::int64_t>(layer, weight, x, in, out);
        const std::vector<std::int64_t> got = cpu_transposed_convolution_by_phase(layer, weight, x, in, out);
        ASSERT_EQ(got.size(), static_cast<std::size_t>(4 * out.first * out.second));
        for (std::size_t n = 0; n < want.size(); ++n)
          ASSERT_EQ(got[n], want[n]) << "stride " << stride << ", kernel " << kernel << ", padding " << padding
                                     << ", element " << n;
        ++cases;
      }
  EXPECT_EQ(cases, 12);
}

TEST(IntegerNetwork, CalibrationRecordsTheLargestOutputOfEveryRescaledChannel) {
  for (double slope : {0.0, 0.01, 0.2}) {
    const auto layers = hyper_synthesis(1);
    std::mt19937 rng(7);
    ActivationRanges ranges;
    std::vector<std::vector<double>> expected;
    for (int n = 0; n < 3; ++n) {
      const auto z = random_latent(rng, 4 * 3 * 4, 6);
      float_forward(chain(layers, slope), z, 3, 4, &ranges);
      reference_network(layers, z, 3, 4, &expected, slope);
    }
    EXPECT_EQ(ranges.samples, 3);
    ASSERT_EQ(ranges.maxima.size(), 2u);
    for (std::size_t l = 0; l < 2; ++l) {
      ASSERT_EQ(ranges.maxima[l].size(), expected[l].size());
      for (std::size_t c = 0; c < expected[l].size(); ++c)
        EXPECT_NEAR(ranges.maxima[l][c], expected[l][c], 1e-12 * (1 + expected[l][c]))
            << "slope " << slope << " layer " << l << " channel " << c;
    }
  }
}

TEST(IntegerNetwork, FloatForwardMatchesTheReference) {
  const auto layers = hyper_synthesis(2);
  std::mt19937 rng(3);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  for (double slope : {0.0, 0.1}) {
    const std::vector<double> got = float_forward(chain(layers, slope), z, 3, 4).scales;
    const Sized want = reference_network(layers, z, 3, 4, nullptr, slope);
    ASSERT_EQ(got.size(), want.values.size());
    EXPECT_EQ(want.height, 12);
    EXPECT_EQ(want.width, 16);
    for (std::size_t n = 0; n < got.size(); ++n) EXPECT_NEAR(got[n], want.values[n], 1e-10);
  }
}

TEST(IntegerNetwork, AccumulatorsFollowTheFloatNetworkWithinTheQuantisationError) {
  for (double slope : {0.0, 0.01, 0.3}) {
    const auto layers = hyper_synthesis(4);
    const Calibrated c = calibrate(chain(layers, slope), 5);
    std::mt19937 rng(6);
    const auto z = random_latent(rng, 4 * 3 * 4, 6);
    const Sized want = reference_network(layers, z, 3, 4, nullptr, slope);
    const std::vector<std::int64_t> acc = tensor_values(c.network, z, 3, 4, c.network.scales);
    ASSERT_EQ(acc.size(), want.values.size());
    const std::vector<double>& step = c.steps[static_cast<std::size_t>(c.network.scales)];
    const std::int64_t plane = want.height * want.width;
    const double largest = largest_magnitude(want.values);
    double worst = 0;
    for (std::size_t n = 0; n < acc.size(); ++n)
      worst = std::max(worst, std::abs(static_cast<double>(acc[n]) * step[n / plane] - want.values[n]));
    // 15-bit activations and 16-bit weights: errors of order 2^-14 of the range, far below 1e-3.
    EXPECT_LT(worst, 1e-3 * largest) << "slope " << slope << ", largest output " << largest;
    EXPECT_GT(largest, 0.5);
  }
}

TEST(IntegerNetwork, IndicesAgreeWithTheFloatPathOnNearlyEveryElement) {
  // Outputs spread over the whole scale table: a wider last layer.
  auto layers = hyper_synthesis(8, 8, 16);
  for (float& w : layers.back().weight) w *= 25;
  const Calibrated c = calibrate(chain(layers), 9, 6);
  const std::vector<double> table = log_scale_table();
  std::mt19937 rng(10);
  std::int64_t agree = 0, total = 0, off_by_more = 0;
  std::vector<int> used(table.size(), 0);
  for (int sample = 0; sample < 6; ++sample) {
    const auto z = random_latent(rng, 4 * 3 * 4, 6);
    const Sized want = reference_network(layers, z, 3, 4);
    const IntegerOutputs got = run_network(c.network, z, 3, 4);
    EXPECT_EQ(got.shape, (Shape{16, 12, 16}));
    EXPECT_TRUE(got.means.empty());
    ASSERT_EQ(got.indices.size(), want.values.size());
    for (std::size_t n = 0; n < got.indices.size(); ++n) {
      const std::int32_t expected = float_index(want.values[n], table);
      agree += got.indices[n] == expected;
      off_by_more += std::abs(got.indices[n] - expected) > 1;
      ++used[got.indices[n]];
      ++total;
    }
  }
  const double fraction = static_cast<double>(agree) / total;
  std::printf("integer vs float index agreement: %lld of %lld (%.4f)\n", static_cast<long long>(agree),
              static_cast<long long>(total), fraction);
  EXPECT_GE(fraction, 0.99);
  EXPECT_EQ(off_by_more, 0);
  EXPECT_GT(std::count_if(used.begin(), used.end(), [](int u) { return u > 0; }), 20) << "indices too concentrated";
}

TEST(IntegerNetwork, Conv2dLayersFollowTheReferenceToo) {
  std::mt19937 rng(11);
  const std::vector<FloatConvLayer> layers = {random_layer(rng, false, 4, 6, 3, 1, 1, 0, 0.4),
                                              random_layer(rng, false, 6, 5, 3, 2, 1, 0, 0.4)};
  const Calibrated c = calibrate(chain(layers), 12);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  const Sized want = reference_network(layers, z, 3, 4);
  const std::vector<std::int64_t> acc = tensor_values(c.network, z, 3, 4, c.network.scales);
  ASSERT_EQ(acc.size(), want.values.size());
  EXPECT_EQ(c.network.output_shape(3, 4), (Shape{5, 2, 2}));
  const double largest = largest_magnitude(want.values);
  const std::vector<double>& step = c.steps[static_cast<std::size_t>(c.network.scales)];
  const std::int64_t plane = want.height * want.width;
  for (std::size_t n = 0; n < acc.size(); ++n)
    EXPECT_NEAR(static_cast<double>(acc[n]) * step[n / plane], want.values[n], 1e-3 * largest);
}

TEST(IntegerNetwork, MeansFollowTheFloatMeansInFixedPoint) {
  // mbt2018-mean's shape: LeakyReLU between the layers, the last layer's
  // outputs split into scales and means.
  auto layers = hyper_synthesis(21, 8, 12);
  for (float& w : layers.back().weight) w *= 10;
  const FloatNetwork network = mean_scale(layers, 0.01);
  const Calibrated c = calibrate(network, 22, 6);
  ASSERT_TRUE(c.network.has_means());
  std::mt19937 rng(23);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  const Sized want = reference_network(layers, z, 3, 4, nullptr, 0.01);
  const IntegerOutputs got = run_network(c.network, z, 3, 4);
  ASSERT_EQ(got.shape, (Shape{6, 12, 16}));
  const std::size_t half = got.indices.size();
  ASSERT_EQ(got.means.size(), half);
  ASSERT_EQ(want.values.size(), 2 * half);
  const std::vector<double> float_means(want.values.begin() + static_cast<std::ptrdiff_t>(half), want.values.end());
  const double largest = largest_magnitude(float_means);
  EXPECT_GT(largest, 1.0);
  double worst = 0;
  for (std::size_t n = 0; n < half; ++n)
    worst =
        std::max(worst, std::abs(std::ldexp(static_cast<double>(got.means[n]), -kMeanFractionBits) - float_means[n]));
  EXPECT_LT(worst, 1e-3 * largest) << "largest mean " << largest;
  // The scales are the first half, indexed as the float path does.
  const std::vector<double> table = log_scale_table();
  std::size_t agree = 0;
  for (std::size_t n = 0; n < half; ++n) agree += got.indices[n] == float_index(want.values[n], table);
  EXPECT_GE(static_cast<double>(agree) / half, 0.99);
  // float_forward splits the same way.
  const FloatOutputs f = float_forward(network, z, 3, 4);
  ASSERT_EQ(f.means.size(), half);
  for (std::size_t n = 0; n < half; ++n) EXPECT_NEAR(f.means[n], float_means[n], 1e-10);
}

TEST(IntegerNetwork, MeansAreOddInTheirInput) {
  // Rounding halves away from zero: a mean and its negation differ only in sign.
  IntegerNetwork network;
  network.in_channels = 1;
  IntegerNode conv;
  conv.op = IntegerOp::convolution;
  conv.inputs = {0};
  conv.conv.in_channels = conv.conv.out_channels = 1;
  conv.conv.transposed = false;
  conv.conv.weight = {1};
  conv.conv.bias = {0};
  network.nodes = {conv};
  network.scales = network.means = 1;
  network.levels = 2;
  network.thresholds = {0};
  network.mean_multiplier = {3};
  network.mean_shift = {1};  // mean = 1.5 v, in units of 2^-16
  check_network(network, "test");
  const IntegerOutputs out = run_network(network, {1, -1, 3, -3, 0}, 1, 5);
  EXPECT_EQ(out.means, (std::vector<std::int64_t>{2, -2, 5, -5, 0}));
  EXPECT_EQ(out.indices, (std::vector<std::int32_t>{1, 0, 1, 0, 0}));
}

// z -> two convolutions whose accumulators are concatenated, a LeakyReLU,
// a convolution, and a slice for the scales: every node kind at once.
FloatNetwork branched(std::uint32_t seed, bool with_means) {
  std::mt19937 rng(seed);
  FloatNetwork network;
  network.in_channels = 4;
  auto conv = [](std::int32_t input, FloatConvLayer layer) {
    FloatNode node;
    node.op = IntegerOp::convolution;
    node.inputs = {input};
    node.conv = std::move(layer);
    return node;
  };
  network.nodes.push_back(conv(0, random_layer(rng, true, 4, 5, 5, 2, 2, 1, 0.4)));  // tensor 1
  network.nodes.push_back(conv(0, random_layer(rng, true, 4, 3, 3, 2, 1, 1, 0.4)));  // tensor 2
  FloatNode concat;
  concat.op = IntegerOp::concat;
  concat.inputs = {1, 2};
  network.nodes.push_back(concat);  // tensor 3: 8 channels
  FloatNode act;
  act.op = IntegerOp::rescale;
  act.inputs = {3};
  act.negative_slope = 0.05;
  network.nodes.push_back(act);  // tensor 4
  FloatConvLayer last = random_layer(rng, false, 8, 10, 3, 1, 1, 0, 0.4);
  for (float& w : last.weight) w *= 10;
  network.nodes.push_back(conv(4, last));  // tensor 5
  FloatNode slice;
  slice.op = IntegerOp::slice;
  slice.inputs = {5};
  slice.begin = 0;
  slice.count = 5;
  network.nodes.push_back(slice);  // tensor 6
  network.scales = 6;
  if (with_means) {
    slice.begin = 5;
    network.nodes.push_back(slice);  // tensor 7
    network.means = 7;
  }
  return network;
}

TEST(IntegerNetwork, ConcatAndSliceGraphsFollowTheReference) {
  const FloatNetwork network = branched(24, true);
  const Calibrated c = calibrate(network, 25, 6);
  std::mt19937 rng(26);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  // The reference, by hand: both branches, joined, LeakyReLU, the last convolution.
  const Sized x{std::vector<double>(z.begin(), z.end()), 4, 3, 4};
  const Sized a = reference_transposed(network.nodes[0].conv, x), b = reference_transposed(network.nodes[1].conv, x);
  Sized joined{a.values, 8, a.height, a.width};
  joined.values.insert(joined.values.end(), b.values.begin(), b.values.end());
  for (double& v : joined.values)
    if (v < 0) v *= 0.05;
  const Sized out = reference_conv(network.nodes[4].conv, joined);
  const IntegerOutputs got = run_network(c.network, z, 3, 4);
  ASSERT_EQ(got.shape, (Shape{5, 6, 8}));
  const std::size_t half = got.indices.size();
  const std::vector<double> table = log_scale_table();
  const std::vector<double> float_means(out.values.begin() + static_cast<std::ptrdiff_t>(half), out.values.end());
  const double largest = largest_magnitude(float_means);
  std::size_t agree = 0;
  for (std::size_t n = 0; n < half; ++n) {
    agree += got.indices[n] == float_index(out.values[n], table);
    EXPECT_NEAR(std::ldexp(static_cast<double>(got.means[n]), -kMeanFractionBits), float_means[n], 1e-3 * largest);
  }
  EXPECT_GE(static_cast<double>(agree) / half, 0.97);
}

TEST(IntegerNetwork, HugeInputsAreClampedNotOverflowed) {
  for (const FloatNetwork& network : {chain(hyper_synthesis(13)), mean_scale(hyper_synthesis(13, 6, 10), 0.01)}) {
    const Calibrated c = calibrate(network, 14);
    std::vector<std::int32_t> z(4 * 3 * 4);
    for (std::size_t n = 0; n < z.size(); ++n)
      z[n] = n % 3 == 0 ? 2147483647 : n % 3 == 1 ? -2147483647 - 1 : static_cast<std::int32_t>(n) * 100000;
    std::vector<std::int32_t> clamped = z;
    for (auto& v : clamped) v = std::clamp(v, -32767, 32767);
    const IntegerOutputs out = run_network(c.network, z, 3, 4);
    const IntegerOutputs same = run_network(c.network, clamped, 3, 4);
    EXPECT_EQ(out.indices, same.indices);
    EXPECT_EQ(out.means, same.means);
    for (std::int32_t i : out.indices) {
      EXPECT_GE(i, 0);
      EXPECT_LT(i, kScaleTableLevels);
    }
  }
}

void expect_refused(const IntegerNetwork& network, const std::string& fragment) {
  try {
    check_network(network, "model.safetensors");
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    return;
  }
  ADD_FAILURE() << "accepted a network with " << fragment;
}

TEST(IntegerNetwork, StoredParametersOutOfRangeAreRefused) {
  const IntegerNetwork good = calibrate(chain(hyper_synthesis(15)), 16).network;
  EXPECT_NO_THROW(check_network(good, "model.safetensors"));
  // Nodes: conv 0, rescale 1, conv 2, rescale 3, conv 4.
  IntegerNetwork bad = good;
  bad.nodes[2].conv.weight[3] = 40000;
  expect_refused(bad, "weight 40000");
  bad = good;
  bad.nodes[1].multiplier[2] = std::int64_t(1) << 16;
  expect_refused(bad, "multiplier");
  bad = good;
  bad.nodes[1].negative_multiplier[2] = -1;
  expect_refused(bad, "multiplier -1");
  bad = good;
  bad.nodes[1].shift[0] = 63;
  expect_refused(bad, "shift");
  bad = good;
  bad.nodes[4].conv.bias[0] = std::int64_t(1) << 50;
  expect_refused(bad, "bias");
  bad = good;
  bad.thresholds.pop_back();
  expect_refused(bad, "thresholds");
  bad = good;
  std::swap(bad.thresholds[0], bad.thresholds[5]);
  expect_refused(bad, "decrease");
  bad = good;
  bad.nodes[2].conv.in_channels = 5;
  expect_refused(bad, "weights");
  bad = good;
  bad.nodes[0].conv.output_padding = 2;
  expect_refused(bad, "geometry");
}

TEST(IntegerNetwork, GraphsThatBreakTheRulesAreRefused) {
  const IntegerNetwork good = calibrate(branched(27, true), 28).network;
  EXPECT_NO_THROW(check_network(good, "model.safetensors"));
  // Nodes: conv 0, conv 1, concat 2, rescale 3, conv 4, slice 5, slice 6 (tensor n + 1 each).
  IntegerNetwork bad = good;
  bad.nodes[4].inputs = {3};  // the concat's accumulators
  bad.nodes[4].conv.in_channels = 8;
  expect_refused(bad, "reads an accumulator");
  bad = good;
  bad.nodes[3].inputs = {0};
  expect_refused(bad, "reads activations");
  bad = good;
  bad.nodes[2].inputs = {1, 0};
  expect_refused(bad, "joins activations and accumulators");
  bad = good;
  bad.nodes[5].count = 11;
  expect_refused(bad, "takes channels [0, 11) of 10");
  bad = good;
  bad.nodes[0].inputs = {2};
  expect_refused(bad, "not computed before it");
  bad = good;
  bad.means = 5;  // 10 channels against the scales' 5
  expect_refused(bad, "the means have 10 channels");
  bad = good;
  bad.mean_shift.pop_back();
  expect_refused(bad, "the means");
  bad = good;
  bad.scales = 99;
  expect_refused(bad, "tensor 99");
  bad = good;
  bad.nodes[1].op = static_cast<IntegerOp>(9);
  expect_refused(bad, "unknown operation 9");
}

// Adds nodes to a FloatNetwork; each call returns the new node's index (1-based: 0 is the hyper-latent).
struct NetworkBuilder {
  FloatNetwork& network;
  std::int32_t node(IntegerOp op, std::vector<std::int32_t> inputs) {
    FloatNode n;
    n.op = op;
    n.inputs = std::move(inputs);
    network.nodes.push_back(n);
    return static_cast<std::int32_t>(network.nodes.size());
  }
  std::int32_t conv(std::int32_t input, FloatConvLayer layer) {
    const std::int32_t t = node(IntegerOp::convolution, {input});
    network.nodes.back().conv = std::move(layer);
    return t;
  }
  std::int32_t rescale(std::int32_t input, double slope) {
    const std::int32_t t = node(IntegerOp::rescale, {input});
    network.nodes.back().negative_slope = slope;
    return t;
  }
};

// Two latent groups of 2 channels, as a channel-conditional model: group 0's
// scales and means from the hyper-latent; group 1's also from group 0's
// rounded latent; the decoded latent = rounded + 0.5 tanh(conv(...)).
FloatNetwork grouped(std::uint32_t seed) {
  std::mt19937 rng(seed);
  FloatNetwork network;
  network.in_channels = 4;
  NetworkBuilder build{network};
  auto node = [&](IntegerOp op, std::vector<std::int32_t> inputs) { return build.node(op, std::move(inputs)); };
  auto conv = [&](std::int32_t input, FloatConvLayer layer) { return build.conv(input, std::move(layer)); };
  auto rescale = [&](std::int32_t input, double slope) { return build.rescale(input, slope); };
  auto slice = [&](std::int32_t input, std::int32_t begin, std::int32_t count) {
    const std::int32_t t = node(IntegerOp::slice, {input});
    network.nodes.back().begin = begin;
    network.nodes.back().count = count;
    return t;
  };
  std::vector<std::int32_t> rounded;
  for (int k = 0; k < 2; ++k) {
    rounded.push_back(node(IntegerOp::input, {}));
    network.nodes.back().count = 2;
  }
  const std::int32_t hyper = rescale(conv(0, random_layer(rng, true, 4, 6, 5, 2, 2, 1, 0.4)), 0.01);
  FloatConvLayer params0 = random_layer(rng, false, 6, 4, 3, 1, 1, 0, 0.4);
  for (float& w : params0.weight) w *= 10;
  const std::int32_t group0 = conv(hyper, params0);  // scales 0..1, means 2..3
  const std::int32_t support = node(IntegerOp::concat, {hyper, rescale(rounded[0], 1)});
  FloatConvLayer params1 = random_layer(rng, false, 8, 4, 3, 1, 1, 0, 0.4);
  for (float& w : params1.weight) w *= 10;
  const std::int32_t group1 = conv(support, params1);
  const std::int32_t scales = node(IntegerOp::concat, {slice(group0, 0, 2), slice(group1, 0, 2)});
  const std::int32_t means = node(IntegerOp::concat, {slice(group0, 2, 2), slice(group1, 2, 2)});
  std::vector<std::int32_t> decoded;
  for (int k = 0; k < 2; ++k) {
    const std::int32_t lrp_input = node(IntegerOp::concat, {hyper, rescale(rounded[static_cast<std::size_t>(k)], 1)});
    const std::int32_t lrp = node(IntegerOp::tanh, {conv(lrp_input, random_layer(rng, false, 8, 2, 3, 1, 1, 0, 0.6))});
    network.nodes.back().scale = 0.5;
    decoded.push_back(node(IntegerOp::add, {rounded[static_cast<std::size_t>(k)], lrp}));
  }
  network.scales = scales;
  network.means = means;
  network.decoded = node(IntegerOp::concat, decoded);
  network.tanh_table.resize(8192);
  for (std::size_t i = 0; i < network.tanh_table.size(); ++i) network.tanh_table[i] = std::tanh(i / 1024.0);
  return network;
}

// Group by group: the integer runner (on `device`) and the float network,
// both fed the integer path's rounded latents round(y - mean) + mean of a
// random y, so that they differ by the quantisation of the network only.
struct GroupedRun {
  std::vector<IntegerOutputs> outputs;
  std::vector<std::int64_t> decoded;
  std::vector<double> float_means, float_decoded;
};

GroupedRun run_grouped(const IntegerNetwork& network, const FloatNetwork& float_network,
                       const std::vector<std::int32_t>& z, std::int64_t height, std::int64_t width,
                       const std::vector<double>& y, Device device) {
  IntegerNetworkRunner runner(network, device);
  FloatEvaluation evaluation(float_network, z, height, width);
  runner.start(z, height, width);
  GroupedRun run;
  std::size_t offset = 0;
  for (std::int32_t k = 0; k < 2; ++k) {
    run.outputs.push_back(runner.outputs(k));
    const IntegerOutputs& out = run.outputs.back();
    std::vector<std::int64_t> rounded(out.means.size());
    for (std::size_t n = 0; n < rounded.size(); ++n) {
      const double mean = std::ldexp(double(out.means[n]), -16);
      rounded[n] = static_cast<std::int64_t>(std::round(y[offset + n] - mean)) * 65536 + out.means[n];
    }
    runner.set_input(k, rounded);
    const FloatOutputs f = evaluation.outputs(k);
    std::vector<double> float_rounded(f.means.size());
    for (std::size_t n = 0; n < f.means.size(); ++n) float_rounded[n] = std::ldexp(double(rounded[n]), -16);
    run.float_means.insert(run.float_means.end(), f.means.begin(), f.means.end());
    evaluation.set_input(k, float_rounded);
    offset += rounded.size();
  }
  run.decoded = runner.values(network.decoded, 0, 4);
  run.float_decoded = evaluation.values(float_network.decoded, 0, 4);
  return run;
}

TEST(IntegerNetwork, LatentGroupsWithTanhAndAddFollowTheFloatNetwork) {
  const FloatNetwork network = grouped(31);
  std::mt19937 rng(32);
  ActivationRanges ranges;
  std::vector<double> y0(static_cast<std::size_t>(4 * 6 * 8));
  std::uniform_real_distribution<double> u(-8, 8);
  for (double& v : y0) v = u(rng);
  for (int n = 0; n < 4; ++n) {
    FloatEvaluation evaluation(network, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
    for (std::int32_t k = 0; k < 2; ++k) {
      evaluation.outputs(k);
      evaluation.set_input(k, std::vector<double>(y0.begin() + k * 96, y0.begin() + (k + 1) * 96));
    }
    evaluation.values(network.decoded, 0, 4);
  }
  const IntegerNetwork integer = quantize_network(network, ranges, log_scale_table());
  EXPECT_EQ(integer.groups(), (std::vector<std::int32_t>{2, 2}));
  const std::vector<std::int32_t> z = random_latent(rng, 4 * 3 * 4, 6);
  std::vector<double> y(y0.size());
  for (double& v : y) v = u(rng);
  const GroupedRun run = run_grouped(integer, network, z, 3, 4, y, Device::cpu());
  double largest_mean = 0, mean_error = 0, decoded_error = 0, lrp = 0;
  for (std::size_t n = 0; n < run.float_means.size(); ++n) {
    const std::size_t k = n / 96, i = n % 96;  // 2 channels of 6x8 a group
    const double mean = std::ldexp(double(run.outputs[k].means[i]), -16);
    largest_mean = std::max(largest_mean, std::abs(run.float_means[n]));
    mean_error = std::max(mean_error, std::abs(mean - run.float_means[n]));
    const double decoded = std::ldexp(double(run.decoded[n]), -16);
    const double rounded = std::round(y[n] - mean) + mean;
    lrp = std::max(lrp, std::abs(decoded - rounded));
    EXPECT_LE(std::abs(decoded - rounded), 0.5) << n;
    decoded_error = std::max(decoded_error, std::abs(decoded - run.float_decoded[n]));
  }
  EXPECT_GT(largest_mean, 1.0);
  EXPECT_LT(mean_error, 5e-3 * largest_mean);
  EXPECT_GT(lrp, 0.1) << "a residual prediction that matters";
  EXPECT_LT(decoded_error, 0.01);
}

TEST(IntegerNetwork, TanhTablesComeFromTheStoredTableExactly) {
  FloatNetwork network = grouped(33);
  ActivationRanges ranges;
  std::mt19937 rng(34);
  FloatEvaluation evaluation(network, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
  for (std::int32_t k = 0; k < 2; ++k) {
    evaluation.outputs(k);
    evaluation.set_input(k, std::vector<double>(96, 1.0));
  }
  evaluation.values(network.decoded, 0, 4);
  const IntegerNetwork integer = quantize_network(network, ranges, log_scale_table());
  for (const IntegerNode& node : integer.nodes) {
    if (node.op != IntegerOp::tanh) continue;
    ASSERT_EQ(node.table.size(), 8192u);
    for (std::size_t i = 0; i < node.table.size(); i += 97)
      EXPECT_EQ(node.table[i], std::llround(0.5 * 65536 * network.tanh_table[i])) << i;
    EXPECT_EQ(node.table.back(), 32768) << "0.5 tanh(8) is 0.5 in units of 2^-16";
  }
  network.tanh_table.clear();
  EXPECT_THROW(quantize_network(network, ranges, log_scale_table()), ConfigError);
}

TEST(IntegerNetwork, LatentGroupsAreBitIdenticalOnCpuAndCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const FloatNetwork network = grouped(35);
  std::mt19937 rng(36);
  ActivationRanges ranges;
  FloatEvaluation calibration(network, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
  for (std::int32_t k = 0; k < 2; ++k) {
    calibration.outputs(k);
    calibration.set_input(k, std::vector<double>(96, 2.0));
  }
  calibration.values(network.decoded, 0, 4);
  const IntegerNetwork integer = quantize_network(network, ranges, log_scale_table());
  for (const auto& [height, width] : std::vector<std::pair<int, int>>{{3, 4}, {1, 1}, {9, 5}}) {
    const std::vector<std::int32_t> z = random_latent(rng, 4 * height * width, 40);
    std::vector<double> y(static_cast<std::size_t>(4 * 2 * height * 2 * width));
    std::uniform_real_distribution<double> u(-30, 30);
    for (double& v : y) v = u(rng);
    const GroupedRun cpu = run_grouped(integer, network, z, height, width, y, Device::cpu());
    const GroupedRun cuda = run_grouped(integer, network, z, height, width, y, Device::cuda());
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(cpu.outputs[k].indices, cuda.outputs[k].indices) << height << "x" << width << " group " << k;
      EXPECT_EQ(cpu.outputs[k].means, cuda.outputs[k].means) << height << "x" << width << " group " << k;
    }
    EXPECT_EQ(cpu.decoded, cuda.decoded) << height << "x" << width;
  }
}

// A checkerboard context model's entropy parameters, narrower: the
// hyper-latent's parameters (convT 5x5/2 to 4 channels); the context, a
// 3x3 convolution of the anchors (the even positions of the rounded latent
// of 2 channels) kept at the odd positions; the scales and means a 1x1
// convolution of both. The decoded latent is the rounded latent itself.
FloatNetwork checkerboard(std::uint32_t seed) {
  std::mt19937 rng(seed);
  FloatNetwork network;
  network.in_channels = 4;
  NetworkBuilder build{network};
  auto node = [&](IntegerOp op, std::vector<std::int32_t> inputs) { return build.node(op, std::move(inputs)); };
  auto conv = [&](std::int32_t input, FloatConvLayer layer) { return build.conv(input, std::move(layer)); };
  auto rescale = [&](std::int32_t input, double slope) { return build.rescale(input, slope); };
  auto mask = [&](std::int32_t input, std::int32_t parity) {
    const std::int32_t t = node(IntegerOp::checkerboard_mask, {input});
    network.nodes.back().parity = parity;
    return t;
  };
  const std::int32_t rounded = node(IntegerOp::input, {});
  network.nodes.back().count = 2;
  const std::int32_t hyper = conv(0, random_layer(rng, true, 4, 4, 5, 2, 2, 1, 0.4));
  const std::int32_t anchors = rescale(mask(rounded, 0), 1);
  const std::int32_t context = mask(conv(anchors, random_layer(rng, false, 2, 4, 3, 1, 1, 0, 0.5)), 1);
  FloatConvLayer parameters = random_layer(rng, false, 8, 4, 1, 1, 0, 0, 0.5);
  for (float& w : parameters.weight) w *= 10;
  const std::int32_t joined = rescale(node(IntegerOp::concat, {hyper, context}), 0.01);
  const std::int32_t out = conv(joined, parameters);
  network.scales = node(IntegerOp::slice, {out});
  network.nodes.back().count = 2;
  network.means = node(IntegerOp::slice, {out});
  network.nodes.back().begin = 2;
  network.nodes.back().count = 2;
  network.decoded = rounded;
  return network;
}

// Calibrated on both passes: the rounded latent zero, then a random one at the anchors.
IntegerNetwork calibrated_checkerboard(std::uint32_t seed) {
  const FloatNetwork network = checkerboard(seed);
  std::mt19937 rng(seed + 1);
  ActivationRanges ranges;
  std::uniform_int_distribution<int> u(-20, 20);
  for (int n = 0; n < 4; ++n) {
    FloatEvaluation evaluation(network, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
    evaluation.set_input(0, std::vector<double>(2 * 6 * 8, 0.0));
    evaluation.outputs(0);
    std::vector<double> anchors(2 * 6 * 8);
    for (double& v : anchors) v = u(rng);
    evaluation.set_input(0, anchors);
    evaluation.outputs(0);
  }
  return quantize_network(network, ranges, log_scale_table());
}

TEST(IntegerNetwork, ACheckerboardMaskKeepsOneColourExactly) {
  const IntegerNetwork network = calibrated_checkerboard(41);
  IntegerNetworkRunner runner(network, Device::cpu());
  std::mt19937 rng(42);
  runner.start(random_latent(rng, 4 * 3 * 4, 6), 3, 4);
  std::vector<std::int64_t> rounded(2 * 6 * 8);
  for (std::size_t n = 0; n < rounded.size(); ++n) rounded[n] = (static_cast<std::int64_t>(n) - 40) * 65536 + 7;
  runner.set_input(0, rounded);
  // Tensor 3 is the anchors mask (node 2): the input at (Y + X) even, 0 at odd positions.
  ASSERT_EQ(network.nodes[2].op, IntegerOp::checkerboard_mask);
  const std::vector<std::int64_t> anchors = runner.values(3, 0, 2);
  ASSERT_EQ(anchors.size(), rounded.size());
  for (std::size_t n = 0; n < rounded.size(); ++n) {
    const std::size_t y = n % 48 / 8, x = n % 8;
    EXPECT_EQ(anchors[n], (y + x) % 2 == 0 ? rounded[n] : 0) << n;
  }
}

TEST(IntegerNetwork, CheckerboardAnchorsReadOnlyTheHyperLatentAndTheOthersOnlyTheAnchors) {
  const IntegerNetwork network = calibrated_checkerboard(43);
  IntegerNetworkRunner runner(network, Device::cpu());
  std::mt19937 rng(44);
  const std::vector<std::int32_t> z = random_latent(rng, 4 * 3 * 4, 6);
  auto outputs_for = [&](const std::vector<std::int64_t>& rounded) {
    runner.set_input(0, rounded);  // again: what was computed from the first is forgotten
    return runner.outputs(0);
  };
  runner.start(z, 3, 4);
  const std::vector<std::int64_t> zero(2 * 6 * 8, 0);
  std::vector<std::int64_t> anchors = zero, everything = zero;
  for (std::size_t n = 0; n < zero.size(); ++n) {
    const std::int64_t v = static_cast<std::int64_t>(rng() % 41) * 65536 - 20 * 65536 + 300;
    everything[n] = v;
    if ((n % 48 / 8 + n % 8) % 2 == 0) anchors[n] = v;
  }
  const IntegerOutputs first = outputs_for(zero), second = outputs_for(anchors), third = outputs_for(everything);
  std::size_t anchor_changed = 0, other_changed = 0;
  for (std::size_t n = 0; n < zero.size(); ++n) {
    const bool anchor = (n % 48 / 8 + n % 8) % 2 == 0;
    if (anchor) {
      EXPECT_EQ(second.means[n], first.means[n]) << n;
      EXPECT_EQ(second.indices[n], first.indices[n]) << n;
    } else {
      other_changed += second.means[n] != first.means[n];
    }
    anchor_changed += third.means[n] != second.means[n] || third.indices[n] != second.indices[n];
  }
  EXPECT_GT(other_changed, zero.size() / 4) << "the non-anchors read the anchors";
  EXPECT_EQ(anchor_changed, 0u) << "the non-anchors' own values are never read";
  EXPECT_EQ(runner.values(network.decoded, 0, 2), everything);
}

TEST(IntegerNetwork, ACheckerboardMaskOfAnotherParityIsRefused) {
  IntegerNetwork bad = calibrated_checkerboard(45);
  EXPECT_NO_THROW(check_network(bad, "model.safetensors"));
  bad.nodes[2].parity = 2;
  expect_refused(bad, "node 2 (checkerboard mask) keeps the positions of parity 2");
}

TEST(IntegerNetwork, CheckerboardPassesAreBitIdenticalOnCpuAndCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const IntegerNetwork network = calibrated_checkerboard(47);
  std::mt19937 rng(48);
  for (const auto& [height, width] : std::vector<std::pair<int, int>>{{3, 4}, {1, 1}, {9, 5}}) {
    const std::vector<std::int32_t> z = random_latent(rng, 4 * height * width, 40);
    std::vector<std::int64_t> anchors(static_cast<std::size_t>(2 * 4 * height * width));
    for (std::int64_t& v : anchors) v = static_cast<std::int64_t>(rng() % 81) * 65536 - 40 * 65536 + 1234;
    std::vector<IntegerOutputs> passes[2];
    for (int device = 0; device < 2; ++device) {
      IntegerNetworkRunner runner(network, device == 0 ? Device::cpu() : Device::cuda());
      runner.start(z, height, width);
      runner.set_input(0, std::vector<std::int64_t>(anchors.size(), 0));
      passes[device].push_back(runner.outputs(0));
      runner.set_input(0, anchors);
      passes[device].push_back(runner.outputs(0));
    }
    for (std::size_t pass = 0; pass < 2; ++pass) {
      EXPECT_EQ(passes[0][pass].indices, passes[1][pass].indices) << height << "x" << width << " pass " << pass;
      EXPECT_EQ(passes[0][pass].means, passes[1][pass].means) << height << "x" << width << " pass " << pass;
    }
  }
}

TEST(IntegerNetwork, IndicesAndMeansAreBitIdenticalOnCpuAndCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937 rng(17);
  for (std::uint32_t seed : {18u, 19u, 20u}) {
    auto layers = hyper_synthesis(seed, 16, 24);
    for (float& w : layers.back().weight) w *= 20;
    for (const FloatNetwork& network : {chain(layers), mean_scale(layers, 0.01), branched(seed, true)}) {
      const Calibrated c = calibrate(network, seed + 100);
      for (const auto& [height, width] : std::vector<std::pair<int, int>>{{3, 4}, {1, 1}, {7, 5}}) {
        std::vector<std::int32_t> z = random_latent(rng, 4 * height * width, 40);
        z[0] = 2147483647;  // clamped alike on both
        const IntegerOutputs cpu = run_network(c.network, z, height, width, Device::cpu());
        const IntegerOutputs cuda = run_network(c.network, z, height, width, Device::cuda());
        EXPECT_EQ(cpu.shape, cuda.shape);
        EXPECT_EQ(cpu.indices, cuda.indices) << "seed " << seed << ", " << height << "x" << width;
        EXPECT_EQ(cpu.means, cuda.means) << "seed " << seed << ", " << height << "x" << width;
      }
    }
  }
}

}  // namespace
}  // namespace plexus::codec

// The integer hyper-synthesis (plexus/codec/integer_network.h and
// integer_network_quantizer.h): against an independent f64 reference of the
// float network (the layers' scatter formulas, written here), the table
// index against the float path's index, calibration, validation of stored
// parameters, and bit-identical indices on the CPU and CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

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
  Sized y{{}, l.out_channels, (x.height - 1) * s - 2 * p + k + l.output_padding,
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

// The float network (ReLU after every hidden layer); `maxima` collects each
// hidden layer's per-channel maximum.
Sized reference_network(const std::vector<FloatConvLayer>& layers, const std::vector<std::int32_t>& z,
                        std::int64_t height, std::int64_t width, std::vector<std::vector<double>>* maxima = nullptr) {
  Sized x{std::vector<double>(z.begin(), z.end()), layers.front().in_channels, height, width};
  if (maxima && maxima->empty())
    for (std::size_t l = 0; l + 1 < layers.size(); ++l) maxima->emplace_back(layers[l].out_channels, 0.0);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    x = layers[l].transposed ? reference_transposed(layers[l], x) : reference_conv(layers[l], x);
    if (l + 1 == layers.size()) break;
    for (std::size_t n = 0; n < x.values.size(); ++n) {
      x.values[n] = std::max(0.0, x.values[n]);
      if (maxima) {
        double& m = (*maxima)[l][n / (x.height * x.width)];
        m = std::max(m, x.values[n]);
      }
    }
  }
  return x;
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
  std::vector<double> output_step;
};

Calibrated calibrate(const std::vector<FloatConvLayer>& layers, std::uint32_t seed, int samples = 4) {
  std::mt19937 rng(seed);
  ActivationRanges ranges;
  for (int n = 0; n < samples; ++n) float_forward(layers, random_latent(rng, 4 * 3 * 4, 6), 3, 4, &ranges);
  Calibrated result;
  result.network = quantize_network(layers, ranges, log_scale_table(), kDefaultActivationHeadroom, &result.output_step);
  return result;
}

TEST(IntegerNetwork, CalibrationRecordsTheLargestReluOutputOfEveryHiddenChannel) {
  const auto layers = hyper_synthesis(1);
  std::mt19937 rng(7);
  ActivationRanges ranges;
  std::vector<std::vector<double>> expected;
  for (int n = 0; n < 3; ++n) {
    const auto z = random_latent(rng, 4 * 3 * 4, 6);
    float_forward(layers, z, 3, 4, &ranges);
    reference_network(layers, z, 3, 4, &expected);
  }
  EXPECT_EQ(ranges.samples, 3);
  ASSERT_EQ(ranges.maxima.size(), 2u);
  for (std::size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(ranges.maxima[l].size(), expected[l].size());
    for (std::size_t c = 0; c < expected[l].size(); ++c)
      EXPECT_NEAR(ranges.maxima[l][c], expected[l][c], 1e-12 * (1 + expected[l][c])) << "layer " << l << " channel " << c;
  }
}

TEST(IntegerNetwork, FloatForwardMatchesTheReference) {
  const auto layers = hyper_synthesis(2);
  std::mt19937 rng(3);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  const std::vector<double> got = float_forward(layers, z, 3, 4);
  const Sized want = reference_network(layers, z, 3, 4);
  ASSERT_EQ(got.size(), want.values.size());
  EXPECT_EQ(want.height, 12);
  EXPECT_EQ(want.width, 16);
  for (std::size_t n = 0; n < got.size(); ++n) EXPECT_NEAR(got[n], want.values[n], 1e-10);
}

TEST(IntegerNetwork, AccumulatorsFollowTheFloatNetworkWithinTheQuantisationError) {
  const auto layers = hyper_synthesis(4);
  const Calibrated c = calibrate(layers, 5);
  std::mt19937 rng(6);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  const Sized want = reference_network(layers, z, 3, 4);
  const std::vector<std::int64_t> acc = last_accumulators(c.network, z, 3, 4);
  ASSERT_EQ(acc.size(), want.values.size());
  const std::int64_t plane = want.height * want.width;
  double largest = 0, worst = 0;
  for (double v : want.values) largest = std::max(largest, std::abs(v));
  for (std::size_t n = 0; n < acc.size(); ++n)
    worst = std::max(worst, std::abs(static_cast<double>(acc[n]) * c.output_step[n / plane] - want.values[n]));
  // 15-bit activations and 16-bit weights: errors of order 2^-14 of the range, far below 1e-3.
  EXPECT_LT(worst, 1e-3 * largest) << "largest output " << largest;
  EXPECT_GT(largest, 0.5);
}

TEST(IntegerNetwork, IndicesAgreeWithTheFloatPathOnNearlyEveryElement) {
  // Outputs spread over the whole scale table: a wider last layer.
  std::mt19937 layer_rng(8);
  auto layers = hyper_synthesis(8, 8, 16);
  for (double& w : layers.back().weight) w *= 25;
  const Calibrated c = calibrate(layers, 9, 6);
  const std::vector<double> table = log_scale_table();
  std::mt19937 rng(10);
  std::int64_t agree = 0, total = 0, off_by_more = 0;
  std::vector<int> used(table.size(), 0);
  for (int sample = 0; sample < 6; ++sample) {
    const auto z = random_latent(rng, 4 * 3 * 4, 6);
    const Sized want = reference_network(layers, z, 3, 4);
    const std::vector<std::int32_t> got = scale_indices(c.network, z, 3, 4);
    ASSERT_EQ(got.size(), want.values.size());
    for (std::size_t n = 0; n < got.size(); ++n) {
      const std::int32_t expected = float_index(want.values[n], table);
      agree += got[n] == expected;
      off_by_more += std::abs(got[n] - expected) > 1;
      ++used[got[n]];
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
  const Calibrated c = calibrate(layers, 12);
  const auto z = random_latent(rng, 4 * 3 * 4, 6);
  const Sized want = reference_network(layers, z, 3, 4);
  const std::vector<std::int64_t> acc = last_accumulators(c.network, z, 3, 4);
  ASSERT_EQ(acc.size(), want.values.size());
  EXPECT_EQ(c.network.output_shape(3, 4), (Shape{5, 2, 2}));
  double largest = 0;
  for (double v : want.values) largest = std::max(largest, std::abs(v));
  const std::int64_t plane = want.height * want.width;
  for (std::size_t n = 0; n < acc.size(); ++n)
    EXPECT_NEAR(static_cast<double>(acc[n]) * c.output_step[n / plane], want.values[n], 1e-3 * largest);
}

TEST(IntegerNetwork, HugeInputsAreClampedNotOverflowed) {
  const Calibrated c = calibrate(hyper_synthesis(13), 14);
  std::vector<std::int32_t> z(4 * 3 * 4);
  for (std::size_t n = 0; n < z.size(); ++n)
    z[n] = n % 3 == 0 ? 2147483647 : n % 3 == 1 ? -2147483647 - 1 : static_cast<std::int32_t>(n) * 100000;
  std::vector<std::int32_t> clamped = z;
  for (auto& v : clamped) v = std::clamp(v, -32767, 32767);
  const auto indices = scale_indices(c.network, z, 3, 4);
  EXPECT_EQ(indices, scale_indices(c.network, clamped, 3, 4));
  for (std::int32_t i : indices) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, kScaleTableLevels);
  }
}

TEST(IntegerNetwork, StoredParametersOutOfRangeAreRefused) {
  const IntegerNetwork good = calibrate(hyper_synthesis(15), 16).network;
  EXPECT_NO_THROW(check_network(good, "model.safetensors"));
  auto refused = [](const IntegerNetwork& network, const std::string& fragment) {
    try {
      check_network(network, "model.safetensors");
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
      return;
    }
    ADD_FAILURE() << "accepted a network with " << fragment;
  };
  IntegerNetwork bad = good;
  bad.layers[1].weight[3] = 40000;
  refused(bad, "weight 40000");
  bad = good;
  bad.layers[0].multiplier[2] = std::int64_t(1) << 16;
  refused(bad, "multiplier");
  bad = good;
  bad.layers[0].shift[0] = 63;
  refused(bad, "shift");
  bad = good;
  bad.layers[2].bias[0] = std::int64_t(1) << 50;
  refused(bad, "bias");
  bad = good;
  bad.thresholds.pop_back();
  refused(bad, "thresholds");
  bad = good;
  std::swap(bad.thresholds[0], bad.thresholds[5]);
  refused(bad, "decrease");
  bad = good;
  bad.layers[1].in_channels = 5;
  refused(bad, "weights");
  bad = good;
  bad.layers[0].output_padding = 2;
  refused(bad, "geometry");
}

TEST(IntegerNetwork, IndicesAreBitIdenticalOnCpuAndCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937 rng(17);
  for (std::uint32_t seed : {18u, 19u, 20u}) {
    auto layers = hyper_synthesis(seed, 16, 24);
    for (double& w : layers.back().weight) w *= 20;
    const Calibrated c = calibrate(layers, seed + 100);
    for (const auto& [height, width] : std::vector<std::pair<int, int>>{{3, 4}, {1, 1}, {7, 5}}) {
      std::vector<std::int32_t> z = random_latent(rng, 4 * height * width, 40);
      z[0] = 2147483647;  // clamped alike on both
      const auto cpu = scale_indices(c.network, z, height, width, Device::cpu());
      const auto cuda = scale_indices(c.network, z, height, width, Device::cuda());
      EXPECT_EQ(cpu, cuda) << "seed " << seed << ", " << height << "x" << width;
    }
  }
}

}  // namespace
}  // namespace plexus::codec

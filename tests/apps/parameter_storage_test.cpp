// export --storage int8 quantises each weight per OUTPUT channel: the axis
// int8_weight_channel_axis names for Conv2d, ConvTranspose2d and
// FullyConnected is checked against what the layers compute (changing the
// weight's slice c along that axis changes output channel c and no other).
#include <gtest/gtest.h>

#include <cmath>

#include "compress_command.h"
#include "plexus/builtin_layers.h"
#include "plexus/context.h"
#include "plexus/net.h"

namespace plexus::ae {
namespace {

struct Case {
  const char* type;
  const char* params;
  Shape input;  // 3 input channels (features); every type has 5 outputs
};

// Output channel `channel`'s values of y, for every element.
std::vector<double> channel_of(const Tensor& y, std::int64_t channel) {
  const std::vector<double> values = y.to_values();
  const std::int64_t channels = y.dim(1);
  const std::int64_t inner = y.numel() / (y.dim(0) * channels);
  std::vector<double> result;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (static_cast<std::int64_t>(i) / inner % channels == channel) result.push_back(values[i]);
  return result;
}

TEST(ParameterStorage, Int8ChannelAxisIsEachWeightsOutputChannels) {
  const std::vector<Case> cases = {
      {"Conv2d", R"({"out_channels": 5, "kernel": 3, "padding": 1, "bias": false})", {1, 3, 4, 4}},
      {"ConvTranspose2d",
       R"({"out_channels": 5, "kernel": 3, "stride": 2, "padding": 1, "output_padding": 1, "bias": false})",
       {1, 3, 4, 4}},
      {"FullyConnected", R"({"out_features": 5, "bias": false})", {2, 3}},
  };
  const Registry registry = builtin_registry();
  for (const Case& c : cases) {
    const ModelSpec spec =
        ModelSpec::from_text(std::string(R"({"name": "one", "inputs": ["x"], "nodes": [{"name": "n", "type": ")") +
                             c.type + R"(", "inputs": ["x"], "outputs": ["y"], "params": )" + c.params + "}]}");
    Net net(spec, registry, {{"x", c.input}}, DType::f64, Device::cpu(), 3);
    Context ctx;
    std::vector<double> x(static_cast<std::size_t>(net.input("x").numel()));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
    net.input("x").copy_from(Tensor::from_values(x, c.input, DType::f64));
    net.forward(ctx);
    const Tensor before = net.blob("y").clone();

    const int axis = int8_weight_channel_axis(c.type);
    ASSERT_GE(axis, 0) << c.type;
    Tensor& weight = net.layer("n").parameter("weight").value;
    ASSERT_EQ(weight.dim(axis), 5) << c.type << " weight " << shape_str(weight.shape());
    // Double the weight's slice 2 along `axis`.
    std::vector<double> w = weight.to_values();
    std::int64_t inner = 1;
    for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < weight.shape().size(); ++d) inner *= weight.shape()[d];
    for (std::size_t i = 0; i < w.size(); ++i)
      if (static_cast<std::int64_t>(i) / inner % 5 == 2) w[i] *= 2;
    weight.copy_from(Tensor::from_values(w, weight.shape(), DType::f64));
    net.forward(ctx);
    for (std::int64_t channel = 0; channel < 5; ++channel) {
      const std::vector<double> a = channel_of(before, channel), b = channel_of(net.blob("y"), channel);
      if (channel == 2) {
        for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], 2 * a[i], 1e-12) << c.type << " " << i;
      } else {
        EXPECT_EQ(a, b) << c.type << " output channel " << channel;
      }
    }
  }
  EXPECT_EQ(int8_weight_channel_axis("GDN"), -1);
  EXPECT_EQ(int8_weight_channel_axis("FactorizedEntropyModel"), -1);
}

}  // namespace
}  // namespace plexus::ae

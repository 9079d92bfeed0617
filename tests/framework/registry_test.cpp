// Registry: unknown types suggest close names, duplicates name both origins,
// LayerConfig reports wrong types and unknown keys.
#include <gtest/gtest.h>

#include "plexus/testing/gtest_helpers.h"

#include "framework/test_layers.h"
#include "plexus/builtin_layers.h"
#include "plexus/layer_config.h"
#include <nlohmann/json.hpp>

#include "plexus/registry.h"

namespace plexus {
namespace {

using testing::error_of;

TEST(Registry, UnknownTypeSuggestsCloseNames) {
  Registry registry = builtin_registry();
  std::string message = error_of<ConfigError>([&] { registry.create("Relu", "act1", {}); });
  EXPECT_NE(message.find("node 'act1'"), std::string::npos) << message;
  EXPECT_NE(message.find("unknown layer type 'Relu'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'ReLU'"), std::string::npos) << message;
}

TEST(Registry, DuplicateTypeNamesBothOrigins) {
  Registry registry = builtin_registry();
  registry.set_origin("plugin libmine.so");
  std::string message = error_of<PluginError>(
      [&] { registry.add("ReLU", [](LayerConfig& c) { return std::make_unique<test::AddLayer>(c); }); });
  EXPECT_NE(message.find("'ReLU' is registered twice"), std::string::npos) << message;
  EXPECT_NE(message.find("first by built-in"), std::string::npos) << message;
  EXPECT_NE(message.find("again by plugin libmine.so"), std::string::npos) << message;
}

TEST(Registry, CloseMatchesRanksByEditDistance) {
  std::vector<std::string> names = {"Conv2d", "ConvTranspose2d", "GDN", "IGDN", "ReLU"};
  ASSERT_FALSE(close_matches("conv2d", names).empty());
  EXPECT_EQ(close_matches("conv2d", names)[0], "Conv2d");
  ASSERT_FALSE(close_matches("GND", names).empty());
  EXPECT_EQ(close_matches("GND", names)[0], "GDN");
  EXPECT_TRUE(close_matches("Softmax", names).empty());
}

TEST(LayerConfig, TypedGettersAndDefaults) {
  LayerConfig config("n", "T", {{"k", 5}, {"rate", 0.5}, {"bias", false}, {"mode", "fast"}, {"dims", {1, 2}}});
  EXPECT_EQ(config.integer("k"), 5);
  EXPECT_EQ(config.number("rate"), 0.5);
  EXPECT_FALSE(config.boolean("bias"));
  EXPECT_EQ(config.text("mode"), "fast");
  EXPECT_EQ(config.integers("dims", {}), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(config.integer("stride", 1), 1);
  config.check_all_used();  // everything was read: no throw
}

TEST(LayerConfig, WrongTypeAndMissingAreNamed) {
  LayerConfig config("enc1", "Conv2d", {{"kernel", "five"}});
  std::string wrong = error_of<ConfigError>([&] { config.integer("kernel"); });
  EXPECT_NE(wrong.find("node 'enc1' (Conv2d): parameter 'kernel' must be an integer, got \"five\""), std::string::npos)
      << wrong;
  std::string missing = error_of<ConfigError>([&] { config.integer("out_channels"); });
  EXPECT_NE(missing.find("parameter 'out_channels' is required"), std::string::npos) << missing;
}

TEST(LayerConfig, UnknownKeysListKnownOnes) {
  LayerConfig config("enc1", "Conv2d", {{"kernal", 5}, {"stride", 2}});
  config.integer("kernel", 3);
  config.integer("stride", 1);
  std::string message = error_of<ConfigError>([&] { config.check_all_used(); });
  EXPECT_NE(message.find("unknown parameter 'kernal'"), std::string::npos) << message;
  EXPECT_NE(message.find("Conv2d takes: kernel, stride"), std::string::npos) << message;
}

TEST(LayerConfig, AMissingRequiredKeyNamesTheMisspeltKeyWritten) {
  LayerConfig config("gn", "GroupNorm", {{"group", 8}, {"eps", 1e-5}});
  std::string message = error_of<ConfigError>([&] { config.integer("groups"); });
  EXPECT_NE(message.find("node 'gn' (GroupNorm): parameter 'groups' is required (an integer); the params have "
                         "'group': did you mean 'groups'?"),
            std::string::npos)
      << message;
  // Through the registry too, for a built-in layer.
  message = error_of<ConfigError>([&] {
    builtin_registry().create("Conv2d", "enc1", {{"out_chanels", 8}, {"kernel", 3}});
  });
  EXPECT_NE(message.find("'out_channels' is required (an integer); the params have 'out_chanels'"), std::string::npos)
      << message;
}

TEST(LayerConfig, OptionalNumbers) {
  LayerConfig config("n", "T", {{"init", {-1, 0.5, 2}}, {"bad", {1, "x"}}, {"scalar", 3.0}});
  EXPECT_EQ(config.numbers("init", {}), (std::vector<double>{-1.0, 0.5, 2.0}));
  EXPECT_EQ(config.numbers("absent", {0.25}), (std::vector<double>{0.25}));
  std::string wrong = error_of<ConfigError>([&] { config.numbers("bad", {}); });
  EXPECT_NE(wrong.find("parameter 'bad' must be an array of numbers, got [1,\"x\"]"), std::string::npos) << wrong;
  std::string scalar = error_of<ConfigError>([&] { config.numbers("scalar", {}); });
  EXPECT_NE(scalar.find("parameter 'scalar' must be an array of numbers, got 3.0"), std::string::npos) << scalar;
  LayerConfig describing = LayerConfig::describing("T");
  EXPECT_EQ(describing.numbers("init", {1.5}), (std::vector<double>{1.5}));
  ASSERT_EQ(describing.parameters().size(), 1u);
  EXPECT_EQ(describing.parameters()[0].kind, "number array");
  EXPECT_EQ(describing.parameters()[0].default_value, "[1.5]");
}

TEST(LayerConfig, RequiredIntegers) {
  LayerConfig config("n", "T", {{"dims", {3, 4}}, {"bad", {1, "x"}}});
  EXPECT_EQ(config.integers("dims"), (std::vector<std::int64_t>{3, 4}));
  std::string missing = error_of<ConfigError>([&] { config.integers("sizes"); });
  EXPECT_NE(missing.find("parameter 'sizes' is required (an array of integers)"), std::string::npos) << missing;
  std::string wrong = error_of<ConfigError>([&] { config.integers("bad"); });
  EXPECT_NE(wrong.find("parameter 'bad' must be an array of integers"), std::string::npos) << wrong;
}

// What a describing LayerConfig records of one parameter.
const ParameterInfo* find_parameter(const std::vector<ParameterInfo>& parameters, const std::string& key) {
  for (const ParameterInfo& parameter : parameters)
    if (parameter.key == key) return &parameter;
  return nullptr;
}

TEST(LayerConfig, DescribingRecordsEveryKeyWithItsDefault) {
  LayerConfig config = LayerConfig::describing("Made");
  EXPECT_TRUE(config.is_describing());
  // Required getters return placeholders instead of failing.
  EXPECT_EQ(config.integer("count"), 0);
  EXPECT_EQ(config.bounded_integer("width", 4, 9), 4);
  EXPECT_EQ(config.integers("sizes"), std::vector<std::int64_t>{});
  EXPECT_EQ(config.number("rate", 0.25), 0.25);
  EXPECT_EQ(config.boolean("bias", true), true);
  EXPECT_EQ(config.text("mode", "fast"), "fast");
  EXPECT_EQ(config.bounded_integer("stride", 2, 1, 8), 2);
  EXPECT_EQ(config.integers("filters", {3, 3}), (std::vector<std::int64_t>{3, 3}));
  config.integer("count");  // read twice, listed once
  const std::vector<ParameterInfo>& p = config.parameters();
  ASSERT_EQ(p.size(), 8u);
  const std::vector<std::string> keys = {"count", "width", "sizes", "rate", "bias", "mode", "stride", "filters"};
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(p[i].key, keys[i]);
  EXPECT_TRUE(p[0].required);
  EXPECT_EQ(p[0].kind, "integer");
  EXPECT_EQ(p[1].range, "[4, 9]");
  EXPECT_TRUE(p[1].required);
  EXPECT_EQ(p[2].kind, "integer array");
  EXPECT_FALSE(p[3].required);
  EXPECT_EQ(p[3].default_value, "0.25");
  EXPECT_EQ(p[4].default_value, "true");
  EXPECT_EQ(p[5].default_value, "\"fast\"");
  EXPECT_EQ(p[6].default_value, "2");
  EXPECT_EQ(p[6].range, "[1, 8]");
  EXPECT_EQ(p[7].default_value, "[3,3]");
  EXPECT_NO_THROW(config.check_all_used());
}

TEST(Registry, ParametersOfBuiltInConvolutions) {
  Registry registry = builtin_registry();
  const std::vector<ParameterInfo> conv = registry.parameters("Conv2d");
  for (const char* key : {"out_channels", "kernel", "stride", "padding", "bias"})
    EXPECT_NE(find_parameter(conv, key), nullptr) << key;
  EXPECT_EQ(find_parameter(conv, "output_padding"), nullptr);
  ASSERT_NE(find_parameter(conv, "out_channels"), nullptr);
  EXPECT_TRUE(find_parameter(conv, "out_channels")->required);
  ASSERT_NE(find_parameter(conv, "stride"), nullptr);
  EXPECT_FALSE(find_parameter(conv, "stride")->required);
  EXPECT_EQ(find_parameter(conv, "stride")->default_value, "1");
  EXPECT_EQ(find_parameter(conv, "padding")->default_value, "0");
  EXPECT_EQ(find_parameter(conv, "bias")->default_value, "true");
  const std::vector<ParameterInfo> transposed = registry.parameters("ConvTranspose2d");
  ASSERT_NE(find_parameter(transposed, "output_padding"), nullptr);
  EXPECT_EQ(find_parameter(transposed, "output_padding")->default_value, "0");
  EXPECT_TRUE(registry.parameters("ReLU").empty());
  const std::vector<ParameterInfo> leaky = registry.parameters("LeakyReLU");
  ASSERT_EQ(leaky.size(), 1u);
  EXPECT_EQ(leaky[0].default_value, "0.01");
}

TEST(Registry, ParametersOfALayerThatRejectsAPlaceholderStopAtItsCheck) {
  Registry registry = builtin_registry();
  const std::vector<ParameterInfo> split = registry.parameters("Split");  // "sizes" must not be empty
  ASSERT_EQ(split.size(), 1u);
  EXPECT_EQ(split[0].key, "sizes");
  EXPECT_TRUE(split[0].required);
  EXPECT_THROW(registry.parameters("Nope"), ConfigError);
}

TEST(Registry, EveryBuiltInLayerHasADescription) {
  Registry registry = builtin_registry();
  for (const std::string& type : registry.types()) EXPECT_FALSE(registry.info(type).description.empty()) << type;
}

}  // namespace
}  // namespace plexus

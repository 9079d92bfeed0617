// Registry: unknown types suggest close names, duplicates name both origins,
// LayerConfig reports wrong types and unknown keys.
#include <gtest/gtest.h>

#include "framework/error_of.h"

#include "framework/test_layers.h"
#include "plexus/builtin_layers.h"
#include "plexus/layer_config.h"
#include <nlohmann/json.hpp>

#include "plexus/registry.h"

namespace plexus {
namespace {

using test::error_of;

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
  std::string message = error_of<PluginError>([&] {
    registry.add("ReLU", [](LayerConfig& c) { return std::make_unique<test::AddLayer>(c); });
  });
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
  message = error_of<ConfigError>(
      [&] { builtin_registry().create("Conv2d", "enc1", {{"out_chanels", 8}, {"kernel", 3}}); });
  EXPECT_NE(message.find("'out_channels' is required (an integer); the params have 'out_chanels'"), std::string::npos)
      << message;
}

TEST(LayerConfig, RequiredIntegers) {
  LayerConfig config("n", "T", {{"dims", {3, 4}}, {"bad", {1, "x"}}});
  EXPECT_EQ(config.integers("dims"), (std::vector<std::int64_t>{3, 4}));
  std::string missing = error_of<ConfigError>([&] { config.integers("sizes"); });
  EXPECT_NE(missing.find("parameter 'sizes' is required (an array of integers)"), std::string::npos) << missing;
  std::string wrong = error_of<ConfigError>([&] { config.integers("bad"); });
  EXPECT_NE(wrong.find("parameter 'bad' must be an array of integers"), std::string::npos) << wrong;
}

}  // namespace
}  // namespace plexus

// The plugin loader and the registry errors a plugin author meets, each
// checked for its message: a good plugin loaded and its layer run; a missing
// file; a library without entry points; an ABI mismatch; a type registered
// twice; an unknown type in a model spec; a wrong parameter for a plugin
// layer; PLEXUS_PLUGIN_PATH with a file and with a folder. The tiny plugins
// are built by tests/plugins/CMakeLists.txt.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/plugin.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

namespace fs = std::filesystem;

using testing::expect_error;

// A fresh folder under the system temp dir, removed at the end of the test.
class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "plexus-plugin-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Sets PLEXUS_PLUGIN_PATH for one test and restores it afterwards.
class PluginPathVariable {
 public:
  explicit PluginPathVariable(const std::string& value) {
    if (const char* old = std::getenv("PLEXUS_PLUGIN_PATH")) old_ = old;
    setenv("PLEXUS_PLUGIN_PATH", value.c_str(), 1);
  }
  ~PluginPathVariable() {
    if (old_.empty()) unsetenv("PLEXUS_PLUGIN_PATH");
    else setenv("PLEXUS_PLUGIN_PATH", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

std::vector<double> run_forward(const Registry& registry, const std::string& type, const nlohmann::json& params,
                                const std::vector<double>& values) {
  auto layer = registry.create(type, "node", params);
  Shape shape{static_cast<std::int64_t>(values.size())};
  EXPECT_EQ(layer->output_shapes({shape}), std::vector<Shape>{shape});
  Context ctx;
  Tensor x = Tensor::from_values(values, shape);
  Tensor y(shape);
  layer->forward(ctx, {&x}, {&y});
  return y.to_values();
}

// A spec with one PluginScale-like node: x -> node "scale" of `type`.
ModelSpec one_node_spec(const std::string& type, const nlohmann::json& params) {
  ModelSpec spec;
  spec.add_input("x").add_node({"scale", type, {"x"}, {"y"}, params});
  return spec;
}

TEST(PluginLoader, LoadsAPluginAndRunsItsLayer) {
  Registry registry = builtin_registry();
  load_plugin(TEST_GOOD_PLUGIN, registry);
  ASSERT_TRUE(registry.contains("PluginScale"));
  EXPECT_EQ(registry.info("PluginScale").origin, std::string("plugin ") + TEST_GOOD_PLUGIN);
  EXPECT_EQ(registry.info("ReLU").origin, "built-in");
  EXPECT_EQ(run_forward(registry, "PluginScale", {}, {1.0, -2.0, 0.5}), (std::vector<double>{2.0, -4.0, 1.0}));
  EXPECT_EQ(run_forward(registry, "PluginScale", {{"factor", 3}}, {1.0, -2.0}), (std::vector<double>{3.0, -6.0}));
}

TEST(PluginLoader, PluginLayerWorksInANet) {
  Registry registry = builtin_registry();
  load_plugin(TEST_GOOD_PLUGIN, registry);
  Net net(one_node_spec("PluginScale", {{"factor", 0.5}}), registry, {{"x", {2, 2}}});
  net.input("x").copy_from(Tensor::from_values({2.0, 4.0, -6.0, 8.0}, {2, 2}));
  Context ctx;
  net.forward(ctx);
  EXPECT_EQ(net.blob("y").to_values(), (std::vector<double>{1.0, 2.0, -3.0, 4.0}));
}

TEST(PluginLoader, MissingFileIsNotFound) {
  Registry registry;
  expect_error<PluginError>([&] { load_plugin("/no/such/folder/libnothing.so", registry); },
                            {"plugin '/no/such/folder/libnothing.so' not found (no such file)"});
}

TEST(PluginLoader, FolderIsNotAPlugin) {
  TempFolder folder;
  Registry registry;
  expect_error<PluginError>([&] { load_plugin(folder.path().string(), registry); },
                            {"plugin '" + folder.path().string() + "' is a folder"});
}

TEST(PluginLoader, FileThatIsNotASharedLibraryCannotBeLoaded) {
  TempFolder folder;
  fs::path fake = folder.path() / "libfake.so";
  std::ofstream(fake) << "not an ELF file\n";
  Registry registry;
  expect_error<PluginError>([&] { load_plugin(fake.string(), registry); },
                            {"plugin '" + fake.string() + "' cannot be loaded: "});
}

TEST(PluginLoader, LibraryWithoutEntryPointsIsNotAPlexusPlugin) {
  Registry registry;
  expect_error<PluginError>([&] { load_plugin(TEST_NO_ENTRY_PLUGIN, registry); },
                            {std::string("'") + TEST_NO_ENTRY_PLUGIN + "' is not a Plexus plugin",
                             "extern \"C\" plexus_plugin_abi_version()"});
}

TEST(PluginLoader, LibraryWithoutRegisterFunctionIsNotAPlexusPlugin) {
  Registry registry;
  expect_error<PluginError>([&] { load_plugin(TEST_NO_REGISTER_PLUGIN, registry); },
                            {"is not a Plexus plugin", "extern \"C\" plexus_plugin_register()"});
}

TEST(PluginLoader, AbiMismatchNamesBothVersions) {
  Registry registry;
  expect_error<PluginError>([&] { load_plugin(TEST_ABI_MISMATCH_PLUGIN, registry); },
                            {std::string("plugin '") + TEST_ABI_MISMATCH_PLUGIN + "'",
                             "built for Plexus plugin ABI version " + std::to_string(kPluginAbiVersion + 1),
                             "this Plexus has ABI version " + std::to_string(kPluginAbiVersion), "rebuild the plugin"});
  EXPECT_FALSE(registry.contains("AbiMismatchLayer")) << "the register function must not run";
}

// A plugin built against ABI 7 has Layer classes with the hint methods that
// traits() replaced: the message says what to change, where to read how.
TEST(PluginLoader, Abi7PluginIsToldHowToMigrate) {
  Registry registry;
  expect_error<PluginError>(
      [&] { load_plugin(TEST_ABI_7_PLUGIN, registry); },
      {"built for Plexus plugin ABI version 7", "this Plexus has ABI version 8", "traits(device)", "ForwardOptions",
       "docs/writing-plugins.md, 'Migrating from ABI 7'", "rebuild the plugin"});
  EXPECT_FALSE(registry.contains("AbiMismatchLayer")) << "the register function must not run";
}

TEST(PluginLoader, TypeRegisteredTwiceNamesBothOrigins) {
  Registry registry = builtin_registry();
  expect_error<PluginError>([&] { load_plugin(TEST_DUPLICATE_RELU_PLUGIN, registry); },
                            {"layer type 'ReLU' is registered twice: first by built-in, again by plugin " +
                             std::string(TEST_DUPLICATE_RELU_PLUGIN)});
  EXPECT_EQ(registry.info("ReLU").origin, "built-in") << "the built-in stays";
  // The failed load leaves no plugin origin behind.
  registry.add("AddedLater", [](LayerConfig&) -> std::unique_ptr<Layer> { return nullptr; });
  EXPECT_EQ(registry.info("AddedLater").origin, "built-in");
}

TEST(PluginLoader, SamePluginLoadedTwiceIsANoOp) {
  Registry registry;
  LoadedPlugin first = load_plugin(TEST_GOOD_PLUGIN, registry);
  EXPECT_FALSE(first.already_loaded);
  EXPECT_NE(std::find(first.types.begin(), first.types.end(), "PluginScale"), first.types.end());
  // The same path, and another path to the same file (a symlink).
  EXPECT_TRUE(load_plugin(TEST_GOOD_PLUGIN, registry).already_loaded);
  const std::filesystem::path link =
      std::filesystem::temp_directory_path() / ("plexus-plugin-link-" + std::to_string(::getpid()) + ".so");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(TEST_GOOD_PLUGIN, link);
  LoadedPlugin again = load_plugin(link.string(), registry);
  std::filesystem::remove(link);
  EXPECT_TRUE(again.already_loaded);
  EXPECT_TRUE(again.types.empty());
  EXPECT_EQ(registry.info("PluginScale").origin, std::string("plugin ") + TEST_GOOD_PLUGIN);
}

TEST(PluginLoader, APluginThatRegistersNothingIsReported) {
  Registry registry;
  LoadedPlugin loaded = load_plugin(TEST_EMPTY_PLUGIN, registry);
  EXPECT_FALSE(loaded.already_loaded);
  EXPECT_TRUE(loaded.types.empty());
  EXPECT_TRUE(registry.types().empty());
}

TEST(PluginLoader, UnknownTypeInSpecSuggestsCloseNames) {
  Registry registry = builtin_registry();
  load_plugin(TEST_GOOD_PLUGIN, registry);
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("PluginScal", {}), registry, {{"x", {2}}});
      },
      {"node 'scale': unknown layer type 'PluginScal'; did you mean 'PluginScale'?"});
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("relu", {}), registry, {{"x", {2}}});
      },
      // The closest first; GELU, as near by edit distance, may follow.
      {"unknown layer type 'relu'; did you mean 'ReLU'"});
}

TEST(PluginLoader, UnknownTypeWithoutPluginSaysHowToLoadOne) {
  Registry registry = builtin_registry();
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("PluginScale", {}), registry, {{"x", {2}}});
      },
      {"node 'scale': unknown layer type 'PluginScale'",
       "registered: ", "load the plugin that defines it with --plugin or PLEXUS_PLUGIN_PATH"});
}

TEST(PluginLoader, WrongParameterNameInSpecNamesNodeAndKnownParams) {
  Registry registry = builtin_registry();
  load_plugin(TEST_GOOD_PLUGIN, registry);
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("PluginScale", {{"facter", 2}}), registry, {{"x", {2}}});
      },
      {"node 'scale' (PluginScale): unknown parameter 'facter'; PluginScale takes: factor"});
}

TEST(PluginLoader, WrongParameterValueInSpecNamesNodeAndValue) {
  Registry registry = builtin_registry();
  load_plugin(TEST_GOOD_PLUGIN, registry);
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("PluginScale", {{"factor", -1}}), registry, {{"x", {2}}});
      },
      {"node 'scale' (PluginScale): parameter 'factor' must be > 0, got -1"});
  expect_error<ConfigError>(
      [&] {
        Net net(one_node_spec("PluginScale", {{"factor", "big"}}), registry, {{"x", {2}}});
      },
      {"node 'scale' (PluginScale): parameter 'factor' must be a number, got \"big\""});
}

TEST(PluginPath, UnsetMeansNoPlugins) {
  PluginPathVariable variable("");
  unsetenv("PLEXUS_PLUGIN_PATH");
  EXPECT_TRUE(plugins_from_environment().empty());
}

TEST(PluginPath, FileEntryIsLoaded) {
  PluginPathVariable variable(TEST_GOOD_PLUGIN);
  std::vector<std::string> plugins = plugins_from_environment();
  ASSERT_EQ(plugins, std::vector<std::string>{TEST_GOOD_PLUGIN});
  Registry registry = builtin_registry();
  for (const std::string& plugin : plugins) load_plugin(plugin, registry);
  EXPECT_TRUE(registry.contains("PluginScale"));
}

TEST(PluginPath, FolderEntryListsEveryLibSoInside) {
  TempFolder folder;
  fs::copy_file(TEST_GOOD_PLUGIN, folder.path() / "libscale.so");
  std::ofstream(folder.path() / "README.txt") << "not a plugin\n";
  std::ofstream(folder.path() / "helper.so") << "no lib prefix: skipped\n";
  fs::create_directory(folder.path() / "libsub.so.d");
  PluginPathVariable variable(folder.path().string());
  std::vector<std::string> plugins = plugins_from_environment();
  ASSERT_EQ(plugins, std::vector<std::string>{(folder.path() / "libscale.so").string()});
  Registry registry = builtin_registry();
  for (const std::string& plugin : plugins) load_plugin(plugin, registry);
  EXPECT_EQ(run_forward(registry, "PluginScale", {}, {1.5}), std::vector<double>{3.0});
}

TEST(PluginPath, ColonSeparatedEntriesKeepTheirOrder) {
  TempFolder folder;
  fs::copy_file(TEST_GOOD_PLUGIN, folder.path() / "libb.so");
  fs::copy_file(TEST_GOOD_PLUGIN, folder.path() / "liba.so");
  PluginPathVariable variable(std::string("/missing/libmissing.so::") + folder.path().string());
  EXPECT_EQ(plugins_from_environment(),
            (std::vector<std::string>{"/missing/libmissing.so", (folder.path() / "liba.so").string(),
                                      (folder.path() / "libb.so").string()}))
      << "empty entries are skipped, a folder's plugins are sorted, missing files are kept for "
         "load_plugin to report";
}

}  // namespace
}  // namespace plexus

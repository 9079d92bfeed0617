// plexus-ae layers: every layer type, sorted, with its origin, description
// and params (defaults included), plugins' types too.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "apps/cli_runner.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

// The type names of a listing: its lines that start with a letter.
std::vector<std::string> listed_types(const std::string& listing) {
  std::vector<std::string> types;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != ' ') types.push_back(line.substr(0, line.find(' ')));
  return types;
}

// The block of `type` in the listing: from its name line to the next blank line.
std::string block_of(const std::string& listing, const std::string& type) {
  const std::size_t start = listing.find("\n" + type + "  (");
  if (start == std::string::npos) return "";
  const std::size_t end = listing.find("\n\n", start + 1);
  return listing.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1);
}

// The line of `key` in a block, without its indentation.
std::string parameter_line(const std::string& block, const std::string& key) {
  const std::size_t start = block.find("    " + key + " ");
  if (start == std::string::npos) return "";
  const std::size_t end = block.find('\n', start);
  std::string line = block.substr(start, end - start);
  return line.substr(line.find_first_not_of(' '));
}

class PlexusAeLayers : public ::testing::Test {
 protected:
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  ScratchFolder folder{"ae-layers"};
};

TEST_F(PlexusAeLayers, ListsEveryTypeSortedWithItsParams) {
  auto listed = run({"layers", "--plugin", TEST_GOOD_PLUGIN});
  ASSERT_EQ(listed.exit_code, 0) << listed.describe();
  const std::string& out = "\n" + listed.out;
  const std::vector<std::string> types = listed_types(listed.out);
  EXPECT_TRUE(std::is_sorted(types.begin(), types.end())) << listed.out;
  for (const char* type : {"Conv2d", "ConvTranspose2d", "GDN", "IGDN", "GaussianConditional", "ReLU", "PluginScale"})
    EXPECT_NE(std::find(types.begin(), types.end(), type), types.end()) << type << "\n" << listed.out;

  const std::string conv = block_of(out, "Conv2d");
  EXPECT_TRUE(contains(conv, "Conv2d  (built-in)")) << conv;
  EXPECT_TRUE(contains(conv, "2-D convolution")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "out_channels"), "integer in [1, ")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "out_channels"), "required")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "kernel"), "required")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "stride"), "default 1")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "padding"), "default 0")) << conv;
  EXPECT_TRUE(contains(parameter_line(conv, "bias"), "boolean, default true")) << conv;
  EXPECT_EQ(parameter_line(conv, "output_padding"), "") << conv;
  EXPECT_TRUE(contains(parameter_line(block_of(out, "ConvTranspose2d"), "output_padding"), "default 0")) << out;
  EXPECT_TRUE(contains(parameter_line(block_of(out, "GDN"), "beta_min"), "number, default 1e-06")) << out;
  EXPECT_TRUE(contains(block_of(out, "ReLU"), "\n  params: none")) << out;

  const std::string plugin = block_of(out, "PluginScale");
  EXPECT_TRUE(contains(plugin, std::string("PluginScale  (plugin ") + TEST_GOOD_PLUGIN + ")")) << plugin;
  EXPECT_TRUE(contains(plugin, "y = factor * x")) << plugin;
  EXPECT_TRUE(contains(parameter_line(plugin, "factor"), "number, default 2")) << plugin;
}

TEST_F(PlexusAeLayers, WithoutPluginsListsOnlyBuiltIns) {
  auto listed = run({"layers"});
  ASSERT_EQ(listed.exit_code, 0) << listed.describe();
  EXPECT_FALSE(contains(listed.out, "PluginScale")) << listed.out;
  EXPECT_TRUE(contains(listed.out, "FactorizedEntropyModel  (built-in)")) << listed.out;
}

TEST_F(PlexusAeLayers, HelpSaysWhatItPrints) {
  auto help = run({"layers", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.describe();
  EXPECT_TRUE(contains(help.out, "origin")) << help.out;
  EXPECT_TRUE(contains(help.out, "defaults")) << help.out;
  EXPECT_TRUE(contains(help.out, "--plugin")) << help.out;
}

}  // namespace
}  // namespace plexus

// plexus-ae summary: a row per node with its output shape, parameters and
// FLOPs, and the totals, checked against counts made here from the spec's
// own numbers; bad specs and sizes refused, naming the culprit. And the
// per-node FLOP count it prints (plexus/flop_count.h) for what no bundled
// spec has. plexus-ae layers: every layer type, sorted, with its origin,
// description and params (defaults included), plugins' types too.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/flop_count.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

const std::string kFactorizedSpec = std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-factorized.json";

struct Row {
  std::string type, output;
  double parameters = -1;
  std::string flops;  // as printed: digits with separators, or "-"
};

double without_separators(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), ','), text.end());
  return std::stod(text);
}

// The table's rows by node: "name  type  [output shape]  parameters  FLOPs".
std::map<std::string, Row> table_rows(const std::string& out) {
  std::map<std::string, Row> rows;
  std::istringstream lines(out.substr(out.find("\nnode ") + 1));
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream cells(line);
    std::string name;
    Row row;
    cells >> name >> row.type;
    const std::size_t open = line.find('['), close = line.rfind(']');
    row.output = line.substr(open, close - open + 1);
    std::istringstream numbers(line.substr(close + 1));
    std::string parameters;
    numbers >> parameters >> row.flops;
    row.parameters = without_separators(parameters);
    rows[name] = row;
  }
  return rows;
}

// The number after `label` in the totals ("parameters:       2,994,691 (...)").
double total(const std::string& out, const std::string& label) {
  const std::size_t at = out.find("\n" + label);
  if (at == std::string::npos) return -1;
  std::istringstream rest(out.substr(at + 1 + label.size()));
  std::string number;
  rest >> number;
  return without_separators(number);
}

// Trainable parameters of each node of a spec of convolutions, GDN/IGDN and a
// factorized entropy model, from the spec's channels and kernels alone:
//   Conv2d, ConvTranspose2d  C_out * C_in * k^2 weights + C_out biases
//   GDN, IGDN                C betas + C^2 gammas
//   FactorizedEntropyModel   per channel, widths 1, filters..., 1: a matrix
//                            (out x in) and a bias (out) per stage, a factor
//                            (out) per stage but the last
std::map<std::string, double> parameters_by_hand(const nlohmann::json& spec) {
  std::map<std::string, double> channels{{"image", 3}}, parameters;
  for (const auto& node : spec["nodes"]) {
    const std::string type = node["type"];
    const double in = channels[node["inputs"][0].get<std::string>()];
    double out = in, count = 0;
    if (type == "Conv2d" || type == "ConvTranspose2d") {
      out = node["params"]["out_channels"];
      const double k = node["params"]["kernel"];
      count = out * in * k * k + out;
    } else if (type == "GDN" || type == "IGDN") {
      count = in + in * in;
    } else if (type == "FactorizedEntropyModel") {
      std::vector<double> widths{1};
      for (const auto& filter : node["params"]["filters"]) widths.push_back(filter);
      widths.push_back(1);
      for (std::size_t k = 0; k + 1 < widths.size(); ++k)
        count += in * (widths[k + 1] * widths[k] + widths[k + 1] + (k + 2 < widths.size() ? widths[k + 1] : 0));
    }
    parameters[node["name"]] = count;
    for (const auto& output : node["outputs"]) channels[output] = out;
  }
  return parameters;
}

class PlexusAeSummary : public ::testing::Test {
 protected:
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  // A copy of the factorized spec with `from` replaced by `to` (the first time).
  std::string edited_spec(const std::string& from, const std::string& to) {
    std::string text = testing::read_bytes(kFactorizedSpec);
    text.replace(text.find(from), from.size(), to);
    const std::string path = folder / "edited.json";
    testing::write_bytes(path, text);
    return path;
  }
  ScratchFolder folder{"ae-summary"};
};

TEST_F(PlexusAeSummary, CountsParametersAndFlopsOfTheFactorizedModel) {
  auto summary = run({"summary", kFactorizedSpec});
  ASSERT_EQ(summary.exit_code, 0) << summary.describe();
  const auto rows = table_rows(summary.out);
  const auto spec = nlohmann::json::parse(testing::read_bytes(kFactorizedSpec));
  ASSERT_EQ(rows.size(), spec["nodes"].size()) << summary.out;

  double expected_total = 0;
  for (const auto& [node, count] : parameters_by_hand(spec)) {
    ASSERT_TRUE(rows.count(node)) << node << "\n" << summary.out;
    EXPECT_EQ(rows.at(node).parameters, count) << node << "\n" << summary.out;
    expected_total += count;
  }
  // 4 convolutions 3->128->128->128->192 and 4 transposed back, k = 5, with
  // biases; 6 GDN/IGDN of 128 channels; 192 channels of 43 entropy parameters.
  EXPECT_EQ(expected_total, (128 * 3 * 25 + 128) + 2 * (128 * 128 * 25 + 128) + (192 * 128 * 25 + 192) +
                                (128 * 192 * 25 + 128) + 2 * (128 * 128 * 25 + 128) + (3 * 128 * 25 + 3) +
                                6 * (128 + 128 * 128) + 192 * 43);
  EXPECT_EQ(total(summary.out, "parameters:"), expected_total) << summary.out;

  // g_a1: 128 -> 128 channels, 5x5, stride 2, writing 64x64 for a 256x256
  // image (256 / 2 / 2): 2 FLOPs per multiply-add, one per input channel and
  // kernel tap of every output element.
  EXPECT_EQ(rows.at("g_a1").output, "[1, 128, 64, 64]") << summary.out;
  EXPECT_EQ(without_separators(rows.at("g_a1").flops), 2.0 * (128 * 64 * 64) * 128 * 25) << summary.out;
  // g_s3, transposed: each of the 128x128 input elements of 128 channels
  // spreads over 3 output channels and 5x5 taps.
  EXPECT_EQ(rows.at("g_s3").output, "[1, 3, 256, 256]") << summary.out;
  EXPECT_EQ(without_separators(rows.at("g_s3").flops), 2.0 * (128 * 128 * 128) * 3 * 25) << summary.out;
  // GDN: each of the 128 outputs of every pixel mixes the squares of all 128 inputs.
  EXPECT_EQ(without_separators(rows.at("g_a0_gdn").flops), 2.0 * (128 * 128 * 128) * 128) << summary.out;
  EXPECT_EQ(rows.at("quantizer").flops, "-") << summary.out;
  EXPECT_EQ(rows.at("rate").output, "[]") << summary.out;

  double flops = 0;
  for (const auto& [node, row] : rows)
    if (row.flops != "-") flops += without_separators(row.flops);
  EXPECT_EQ(total(summary.out, "forward FLOPs:"), flops) << summary.out;
  EXPECT_EQ(total(summary.out, "FLOPs per image:"), flops) << summary.out;
  EXPECT_TRUE(contains(summary.out, "A multiply-add counts as 2 FLOPs")) << summary.out;
}

TEST_F(PlexusAeSummary, BuildsForTheGivenSizeAndBatch) {
  auto summary = run({"summary", "bmshj2018-factorized", "--patch", "64x128", "--batch", "2"});
  ASSERT_EQ(summary.exit_code, 0) << summary.describe();
  const auto rows = table_rows(summary.out);
  EXPECT_EQ(rows.at("g_a0").output, "[2, 128, 32, 64]") << summary.out;
  EXPECT_EQ(rows.at("g_a3").output, "[2, 192, 4, 8]") << summary.out;
  EXPECT_EQ(without_separators(rows.at("g_a0").flops), 2.0 * (2 * 128 * 32 * 64) * 3 * 25) << summary.out;
  EXPECT_EQ(total(summary.out, "forward FLOPs:"), 2 * total(summary.out, "FLOPs per image:")) << summary.out;
}

TEST_F(PlexusAeSummary, TakesLayersFromPlugins) {
  const std::string spec = edited_spec("\"type\": \"GDN\"", "\"type\": \"PluginScale\"");
  auto without = run({"summary", spec});
  EXPECT_EQ(without.exit_code, 1) << without.describe();
  EXPECT_TRUE(contains(without.err, "unknown layer type 'PluginScale'")) << without.describe();
  EXPECT_TRUE(contains(without.err, "--plugin")) << without.describe();

  auto with = run({"summary", spec, "--plugin", TEST_GOOD_PLUGIN});
  ASSERT_EQ(with.exit_code, 0) << with.describe();
  const auto rows = table_rows(with.out);
  EXPECT_EQ(rows.at("g_a0_gdn").type, "PluginScale") << with.out;
  EXPECT_EQ(rows.at("g_a0_gdn").output, "[1, 128, 128, 128]") << with.out;
  EXPECT_EQ(rows.at("g_a0_gdn").flops, "-") << with.out;
}

TEST_F(PlexusAeSummary, RefusesBadInputNamingIt) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases{
      {{"summary", folder / "missing.json"}, {"missing.json"}},
      {{"summary", "no-such-model"}, {"unknown model 'no-such-model'", "bmshj2018-factorized"}},
      {{"summary", edited_spec("\"GDN\"", "\"GDNX\"")}, {"unknown layer type 'GDNX'", "g_a0_gdn"}},
      {{"summary", kFactorizedSpec, "--patch", "abc"}, {"--patch", "'abc'"}},
      {{"summary", kFactorizedSpec, "--patch", "16x"}, {"--patch", "'16x'"}},
      {{"summary", kFactorizedSpec, "--patch", "0"}, {"--patch", "out of range"}},
      {{"summary", kFactorizedSpec, "--patch", "70000x64"}, {"--patch", "out of range"}},
      {{"summary", kFactorizedSpec, "--patch", "100"}, {"--patch 100", "stride", "distortion"}},
      {{"summary", kFactorizedSpec, "--batch", "0"}, {"--batch"}},
  };
  for (const Case& c : cases) {
    auto refused = run(c.args);
    EXPECT_EQ(refused.exit_code, 1) << refused.describe();
    EXPECT_EQ(refused.out, "") << refused.describe();
    for (const std::string& name : c.named)
      EXPECT_TRUE(contains(refused.err, name)) << name << "\n" << refused.describe();
  }
  const std::string malformed = folder / "malformed.json";
  testing::write_bytes(malformed, "{\"name\": \"x\", \"inputs\": [\"image\"], \"nodes\": [");
  auto refused = run({"summary", malformed});
  EXPECT_EQ(refused.exit_code, 1) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "malformed.json")) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "malformed JSON")) << refused.describe();
}

// The counts of layers no bundled spec has, and of groups, which none uses yet.
TEST(FlopCount, CountsGroupsFullyConnectedAndNothingForOtherLayers) {
  using nlohmann::json;
  // 8 -> 16 channels in 4 groups, 3x3: each output element reads 8 / 4 = 2 channels of 9 taps.
  EXPECT_EQ(forward_flops("Conv2d", json{{"kernel", 3}, {"groups", 4}}, {{2, 8, 10, 10}}, {{2, 16, 5, 5}}),
            2.0 * (2 * 16 * 5 * 5) * 2 * 9);
  // Depthwise transposed, 6 channels, 4x4: each input element spreads over 1 channel of 16 taps.
  EXPECT_EQ(forward_flops("ConvTranspose2d", json{{"kernel", 4}, {"groups", 6}}, {{1, 6, 3, 3}}, {{1, 6, 6, 6}}),
            2.0 * (6 * 3 * 3) * 16);
  // [5, 2, 3] flattened to 6 features per item, 7 outputs each.
  EXPECT_EQ(forward_flops("FullyConnected", json{{"out_features", 7}}, {{5, 2, 3}}, {{5, 7}}), 2.0 * 5 * 7 * 6);
  EXPECT_EQ(forward_flops("SoftmaxProjection", json{{"vocab_size", 11}}, {{4, 6}, {4}}, {{}}), 2.0 * 4 * 6 * 11);
  // [3, 4, 5] x [3, 5, 6]: 3 products of 4x5 by 5x6; transposed A [3, 5, 4] has the same K = 5.
  EXPECT_EQ(forward_flops("MatMul", json::object(), {{3, 4, 5}, {3, 5, 6}}, {{3, 4, 6}}), 2.0 * 3 * 4 * 6 * 5);
  EXPECT_EQ(forward_flops("MatMul", json{{"transpose_a", true}}, {{3, 5, 4}, {3, 5, 6}}, {{3, 4, 6}}),
            2.0 * 3 * 4 * 6 * 5);
  EXPECT_FALSE(forward_flops("ReLU", json::object(), {{1, 3, 4, 4}}, {{1, 3, 4, 4}}).has_value());
  EXPECT_FALSE(forward_flops("Conv2d", json{{"kernel", 3}}, {}, {}).has_value());
}

}  // namespace
}  // namespace plexus

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

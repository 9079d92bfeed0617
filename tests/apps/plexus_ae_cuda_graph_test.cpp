// plexus-ae train on CUDA with --cuda-graph on and off: the same steps, so
// the logged losses agree (up to the order of floating-point atomics in the
// gradients), also across validations (which reshape the net, so the graph
// is recorded again after each), and the log says nothing about falling back
// for the built-in layers. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

std::vector<double> logged_losses(const std::string& path) {
  std::vector<double> losses;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto entry = nlohmann::json::parse(line);
    if (entry["kind"] == "train") losses.push_back(entry["loss"].get<double>());
  }
  return losses;
}

TEST(PlexusAeCudaGraph, CudaGraphOnAndOffTrainAlike) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ScratchFolder folder{"ae-graph"};
  testing::save_png(folder / "images/a.png", testing::position_image(48, 40));
  testing::save_png(folder / "images/b.png", testing::position_image(40, 52));
  std::map<std::string, std::vector<double>> losses;
  for (const std::string graph : {"on", "off"}) {
    auto result = testing::run_plexus_ae({"train",
                                          "--data",
                                          folder / "images",
                                          "--model",
                                          testing::test_model("tiny.json"),
                                          "--patch",
                                          "16",
                                          "--batch",
                                          "2",
                                          "--lr",
                                          "0.005",
                                          "--steps",
                                          "12",
                                          "--log-every",
                                          "3",
                                          "--seed",
                                          "3",
                                          "--device",
                                          "cuda",
                                          "--cuda-graph",
                                          graph,
                                          "--val",
                                          folder / "images",
                                          "--val-every",
                                          "5",
                                          "--out",
                                          folder / graph},
                                         folder.path());
    ASSERT_EQ(result.exit_code, 0) << result.describe();
    EXPECT_FALSE(contains(result.err, "CUDA graph off")) << result.err;
    losses[graph] = logged_losses(folder / (graph + "/metrics.jsonl"));
  }
  ASSERT_EQ(losses["on"].size(), 4u);
  ASSERT_EQ(losses["off"].size(), 4u);
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_NEAR(losses["on"][k], losses["off"][k], 1e-4 * std::abs(losses["off"][k])) << "log line " << k;
}

}  // namespace
}  // namespace plexus

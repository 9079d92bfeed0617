// plexus-ae against bad input, end to end: each case that once crashed,
// hung, lost a file or answered wrongly now exits 1 (never by a signal) with
// a message naming the culprit, or does the right thing with a warning.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <csignal>
#include <functional>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/atomic_file.h"
#include "plexus/checkpoint.h"

namespace plexus {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::ScratchFolder;

class PlexusAeHardening : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "train/a.png", testing::position_image(40, 36));
    testing::save_png(folder / "train/sub/b.png", testing::position_image(24, 20));
  }
  std::vector<std::string> tiny_run(const std::string& out, std::vector<std::string> extra = {},
                                    const std::string& model = testing::test_model("tiny.json")) {
    std::vector<std::string> args{"train",   "--data", folder / "train", "--model", model,      "--patch", "16",
                                  "--batch", "2",      "--steps",        "4",       "--device", "cpu",     "--threads",
                                  "1",       "--out",  folder / out};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  // Runs to completion and expects exit code 1 with `fragment` on stderr.
  void expect_failure(const std::vector<std::string>& args, const std::string& fragment) {
    const auto result = run(args);
    EXPECT_EQ(result.term_signal, 0) << result.describe();
    EXPECT_EQ(result.exit_code, 1) << result.describe();
    EXPECT_TRUE(contains(result.err, fragment)) << "expected: " << fragment << "\n" << result.describe();
  }
  // The tiny spec with `params` of node `node` replaced, written to a file.
  std::string spec_with(const std::string& node, const nlohmann::json& params) {
    auto spec = nlohmann::json::parse(testing::read_bytes(testing::test_model("tiny.json")));
    for (auto& n : spec["nodes"])
      if (n["name"] == node) n["params"] = params;
    const std::string path = folder / (node + "-edited.json");
    testing::write_bytes(path, spec.dump());
    return path;
  }
  void train_model(const std::string& out) {
    const auto trained = run(tiny_run(out));
    ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  }
  // Loads <out>/<file>, lets `edit` change it, saves it back.
  void edit_checkpoint(const std::string& path, const std::function<void(TensorFile&)>& edit) {
    TensorFile file = load_safetensors(path);
    edit(file);
    save_safetensors(path, file);
  }
  ScratchFolder folder{"ae-hardening"};
};

TEST_F(PlexusAeHardening, ConvolutionSizesThatOverflowedAreRefusedByName) {
  expect_failure(
      tiny_run("a", {}, spec_with("g_a0", {{"out_channels", 8}, {"kernel", 4294967296LL}, {"padding", 2147483646}})),
      "node 'g_a0' (Conv2d): parameter 'kernel' must be in [1, 4096], got 4294967296");
  expect_failure(
      tiny_run("b", {},
               spec_with("g_s0", {{"out_channels", 8}, {"kernel", 5}, {"stride", 4294967296LL}, {"padding", 2}})),
      "node 'g_s0' (ConvTranspose2d): parameter 'stride' must be in [1, 4096], got 4294967296");
  expect_failure(tiny_run("c", {}, spec_with("g_a0", {{"out_channels", 8}, {"kernel", 18446744073709551615ULL}})),
                 "parameter 'kernel' is too large for a 64-bit integer, got 18446744073709551615");
  expect_failure(tiny_run("d", {}, spec_with("g_a1", {{"out_channels", 100000}, {"kernel", 5}})),
                 "node 'g_a1' (Conv2d): parameter 'out_channels' must be in [1, 65536], got 100000");
}

TEST_F(PlexusAeHardening, ThreadCountHasAnUpperBound) {
  auto args = tiny_run("t");
  *(std::find(args.begin(), args.end(), "--threads") + 1) = "100000";
  expect_failure(args, "--threads must be in [0, 256], got 100000");
}

TEST_F(PlexusAeHardening, SpecWithAValueOfTheWrongTypeNamesFileAndPath) {
  const std::string path = folder / "bad-name.json";
  testing::write_bytes(path, R"({"name": 3, "inputs": ["image"], "nodes": []})");
  expect_failure(tiny_run("s", {}, path), path + ": at /name: the model name must be a string, got 3");
}

TEST_F(PlexusAeHardening, AFinishedModelOfAnotherRunIsNotOverwrittenUnlessAsked) {
  train_model("run");
  fs::remove(folder / "run/checkpoint.safetensors");
  const std::string model_before = testing::read_bytes(folder / "run/model.safetensors");
  expect_failure(tiny_run("run", {"--seed", "9"}),
                 "already holds model.safetensors and metrics.jsonl of an earlier run; pass --overwrite");
  EXPECT_EQ(testing::read_bytes(folder / "run/model.safetensors"), model_before);
  const auto replaced = run(tiny_run("run", {"--seed", "9", "--overwrite"}));
  ASSERT_EQ(replaced.exit_code, 0) << replaced.describe();
  EXPECT_NE(testing::read_bytes(folder / "run/model.safetensors"), model_before);
}

TEST_F(PlexusAeHardening, TemporaryFilesOfKilledRunsAreRemovedAtStart) {
  fs::create_directories(folder / "run");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // `child` is now the pid of no running process
  const std::string stale = folder / ("run/checkpoint.safetensors" + temporary_suffix(child));
  testing::write_bytes(stale, std::string(1000, 'x'));
  train_model("run");
  EXPECT_FALSE(fs::exists(stale));
}

TEST_F(PlexusAeHardening, CheckpointWithNonFiniteWeightsDoesNotEvaluate) {
  train_model("run");
  edit_checkpoint(folder / "run/model.safetensors", [](TensorFile& file) {
    Tensor weight = file.tensors.at("g_s1.weight").clone();
    weight.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    file.tensors["g_s1.weight"] = weight;
  });
  expect_failure({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "train", "--device", "cpu"},
                 "tensor 'g_s1.weight' holds a non-finite value (nan at element 3)");
}

TEST_F(PlexusAeHardening, SavedSettingsOutOfRangeAreRefusedOnResume) {
  train_model("run");
  const std::string checkpoint = folder / "run/checkpoint.safetensors";
  const TensorFile original = load_safetensors(checkpoint);
  auto with_settings = [&](const std::function<void(nlohmann::json&)>& edit) {
    TensorFile file = original;
    auto settings = nlohmann::json::parse(file.metadata.at("plexus_ae.train"));
    edit(settings);
    file.metadata["plexus_ae.train"] = settings.dump();
    save_safetensors(checkpoint, file);
  };
  with_settings([](nlohmann::json& s) { s["batch"] = 1000000000000LL; });
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "8", "--device", "cpu"},
                 "(training settings): at /batch: must be an integer in [1, 65536], got 1000000000000");
  with_settings([](nlohmann::json& s) { s["lambda"] = "high"; });
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "8", "--device", "cpu"},
                 "at /lambda: must be a finite number > 0, got \"high\"");
  with_settings([](nlohmann::json& s) { s["lambdas"] = {0.01, -1}; });
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "8", "--device", "cpu"},
                 "at /lambdas: must be a list of at most 1000 finite numbers > 0, got [0.01,-1]");
  TensorFile file = original;
  file.metadata["step"] = "-5";
  save_safetensors(checkpoint, file);
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "8", "--device", "cpu"},
                 "metadata \"step\" is '-5', not an integer in [0, 1125899906842624]");
  file = original;
  file.metadata["optimizer_steps"] = "9223372036854775800";
  save_safetensors(checkpoint, file);
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "8", "--device", "cpu"},
                 "metadata \"optimizer_steps\" is '9223372036854775800', not an integer");
}

TEST_F(PlexusAeHardening, MetricsLogWithAValueOfTheWrongTypeNamesFileAndLine) {
  const auto first = run(tiny_run("run", {"--checkpoint-every", "2", "--log-every", "1"}));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  testing::write_bytes(folder / "run/metrics.jsonl",
                       "{\"kind\": \"train\", \"step\": 1}\n{\"kind\": \"train\", \"step\": \"two\"}\n");
  expect_failure({"train", "--out", folder / "run", "--resume", "--steps", "6", "--device", "cpu"},
                 "metrics.jsonl line 2: at /step: type must be number, but is string");
}

// JSON nested 120,000 levels deep (a few hundred kilobytes of brackets) in a model file's spec or in
// a line of the metrics log: a clear error, never a stack overflow (export used to die with SIGSEGV).
TEST_F(PlexusAeHardening, DeeplyNestedJsonIsRefusedByName) {
  train_model("run");
  const std::string deep = std::string(120000, '[') + std::string(120000, ']');
  const std::string model = folder / "run/model.safetensors";
  edit_checkpoint(model, [&](TensorFile& file) {
    auto spec = nlohmann::json::parse(file.metadata.at("model_spec"));
    file.metadata["model_spec"] = spec.dump().substr(0, spec.dump().size() - 1) + ",\"deep\":" + deep + "}";
  });
  expect_failure({"export", "--model", model, "--out", folder / "exported.safetensors"},
                 "model.safetensors (model spec in its metadata): the JSON nests arrays or objects more than 64 "
                 "levels deep");

  const auto first = run(tiny_run("again", {"--checkpoint-every", "2", "--log-every", "1"}));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  testing::write_bytes(folder / "again/metrics.jsonl", "{\"kind\": \"train\", \"step\": 1}\n" + deep + "\n");
  expect_failure({"train", "--out", folder / "again", "--resume", "--steps", "6", "--device", "cpu"},
                 "metrics.jsonl line 2: the JSON nests arrays or objects more than 64 levels deep");
}

TEST_F(PlexusAeHardening, ASymlinkLoopCountsEachImageOnce) {
  fs::create_symlink("..", folder / "train/sub/loop");
  fs::create_symlink(folder / "train/sub", folder / "train/again");
  const auto result = run(tiny_run("run"));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "2 image(s) from")) << result.err;
  EXPECT_TRUE(contains(result.err, "it is a link to a folder already searched")) << result.err;
}

TEST_F(PlexusAeHardening, AnUnlistableEntryIsWarnedAbout) {
  fs::create_symlink("self.png", folder / "train/self.png");  // a link loop: ELOOP
  const auto result = run(tiny_run("run"));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "skipping '" + (folder / "train/self.png") + "': cannot tell what it is: "))
      << result.err;
  // Root reads any folder, so the unreadable-folder half needs an ordinary
  // user; as root only the link-loop half above runs.
  if (geteuid() == 0) return;
  fs::create_directories(folder / "train/locked");
  fs::permissions(folder / "train/locked", fs::perms::none);
  const auto locked = run(tiny_run("run2"));
  fs::permissions(folder / "train/locked", fs::perms::owner_all);
  ASSERT_EQ(locked.exit_code, 0) << locked.describe();
  EXPECT_TRUE(contains(locked.err, "skipping folder '" + (folder / "train/locked") + "'")) << locked.err;
}

TEST_F(PlexusAeHardening, EvalOutputInsideTheDataFolderIsRefused) {
  train_model("run");
  expect_failure({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "train", "--out",
                  folder / "train/recon"},
                 "is inside the --data folder");
  EXPECT_FALSE(fs::exists(folder / "train/recon"));
}

TEST_F(PlexusAeHardening, ImagesOverThePixelLimitAreSkippedNamingTheOption) {
  const auto result = run(tiny_run("run", {"--max-image-pixels", "1000"}));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "the image is 40x36 = 1440 pixels, more than the limit of 1000 pixels (raise the "
                                   "limit with --max-image-pixels)"))
      << result.err;
  EXPECT_TRUE(contains(result.err, "1 image(s) from")) << result.err;
}

TEST_F(PlexusAeHardening, AnUnwritableOutputGivesTheSystemsReason) {
  testing::write_bytes(folder / "plain-file", "x");
  expect_failure(tiny_run("plain-file/run"), "Not a directory");
}

TEST_F(PlexusAeHardening, DuplicateTensorInAModelIsReportedAsSuch) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  testing::write_bytes(folder / "dup.safetensors", bytes + header + std::string(8, '\0'));
  expect_failure({"eval", "--model", folder / "dup.safetensors", "--data", folder / "train"},
                 "the header names tensor 'a' twice");
}

// eval --out on a full disk: RLIMIT_FSIZE makes every write past 300 bytes
// fail (EFBIG, as ENOSPC would): the 4x4 reconstruction fits, eval.json does
// not. eval must exit 1 naming eval.json, not print "written" over a
// truncated file. stderr goes to a pipe, which the limit does not touch.
TEST_F(PlexusAeHardening, EvalOnAFullDiskFailsAndLeavesNoTruncatedFile) {
  train_model("run");
  testing::save_png(folder / "eval/small.png", testing::position_image(4, 4));
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  const std::string model = folder / "run/model.safetensors", data = folder / "eval", out = folder / "recon";
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // inherited through exec: writes fail instead of killing
    rlimit limit{300, 300};
    setrlimit(RLIMIT_FSIZE, &limit);
    dup2(pipe_ends[1], 2);
    close(pipe_ends[0]);
    execl(PLEXUS_AE_EXECUTABLE, PLEXUS_AE_EXECUTABLE, "eval", "--model", model.c_str(), "--data", data.c_str(), "--out",
          out.c_str(), "--device", "cpu", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_ends[1]);
  std::string err;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_ends[0], buffer, sizeof buffer)) > 0;) err.append(buffer, static_cast<std::size_t>(n));
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_TRUE(contains(err, "cannot write the evaluation results '" + (folder / "recon/eval.json") + "'")) << err;
  EXPECT_TRUE(contains(err, "File too large")) << err;
  EXPECT_FALSE(contains(err, "written")) << err;
  EXPECT_TRUE(fs::exists(folder / "recon/small.png"));
  EXPECT_FALSE(fs::exists(folder / "recon/eval.json"));
  for (const auto& entry : fs::recursive_directory_iterator(folder / "recon"))
    EXPECT_FALSE(contains(entry.path().string(), ".tmp-")) << entry.path();
}

}  // namespace
}  // namespace plexus

// Inputs that once crashed, hung or were silently accepted, at the library
// level: size arithmetic that overflowed, safetensors headers with duplicate
// keys or numbers too large, checkpoints with non-finite weights or step
// counts out of range, JSON errors without the file, temporary files of
// killed runs, and loader threads that could not be created.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "data/data_test_support.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/builtin_layers.h"
#include "plexus/atomic_file.h"
#include "plexus/checked_math.h"
#include "plexus/checkpoint.h"
#include "plexus/data/batch_loader.h"
#include "plexus/json_errors.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

using testing::error_of;
using testing::ScratchFolder;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CheckedMath, OverflowNamesTheQuantity) {
  EXPECT_EQ(checked_mul(std::int64_t{1} << 31, std::int64_t{1} << 31, "x"), std::int64_t{1} << 62);
  EXPECT_EQ(checked_add(std::numeric_limits<std::int64_t>::max() - 1, 1, "x"),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_TRUE(contains(
      error_of<ShapeError>([] { checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 32, "the weight size"); }),
      "the weight size overflows: 4294967296 * 4294967296 does not fit in 64 bits"));
  EXPECT_TRUE(contains(error_of<ShapeError>([] { checked_add(std::numeric_limits<std::int64_t>::max(), 1, "H + 2p"); }),
                       "H + 2p overflows"));
  EXPECT_TRUE(contains(error_of<ShapeError>([] { shape_numel({1LL << 40, 1LL << 40}); }), "does not fit in 64 bits"));
}

TEST(TensorLimits, HugeShapesAreRefusedBeforeAllocating) {
  EXPECT_TRUE(contains(error_of<ShapeError>([] {
                         Tensor(Shape{1LL << 40, 1LL << 40});
                       }),
                       "the element count of shape [1099511627776, 1099511627776] does not fit in 64 bits"));
  EXPECT_TRUE(contains(error_of<ShapeError>([] {
                         Tensor(Shape{1LL << 20, 1LL << 20});
                       }),
                       "1099511627776 elements, more than the limit of 17179869184"));
  const std::size_t previous = max_tensor_bytes();
  set_max_tensor_bytes(1024);
  EXPECT_TRUE(contains(error_of<ShapeError>([] {
                         Tensor(Shape{16, 17});
                       }),
                       "cannot create a tensor of shape [16, 17] (f32): 1088 bytes, more than the limit of 1024"));
  EXPECT_EQ(Tensor(Shape{16, 16}).numel(), 256);
  set_max_tensor_bytes(previous);
}

TEST(JsonErrors, ModelSpecErrorsNameTheFileAndThePath) {
  EXPECT_TRUE(contains(
      error_of<ConfigError>([] { ModelSpec::from_text(R"({"name": 5, "inputs": [], "nodes": []})", "m.json"); }),
      "m.json: at /name: the model name must be a string, got 5"));
  const std::string overflow =
      error_of<ConfigError>([] { ModelSpec::from_text(R"({"inputs": [], "nodes": [], "name": 1e999})", "big.json"); });
  EXPECT_TRUE(contains(overflow, "big.json: ")) << overflow;
  EXPECT_TRUE(contains(overflow, "number overflow")) << overflow;
  EXPECT_FALSE(contains(overflow, "[json.exception")) << overflow;
  const std::string wrapped = error_of<ConfigError>(
      [] { read_json_from("settings.json", "/batch", [] { return nlohmann::json("x").get<int>(); }); });
  EXPECT_EQ(wrapped, "settings.json: at /batch: type must be number, but is string");
}

ModelSpec small_spec() {
  return ModelSpec::from_text(R"({"inputs": ["x"], "nodes": [
      {"name": "fc", "type": "FullyConnected", "inputs": ["x"], "outputs": ["y"], "params": {"out_features": 3}}]})");
}

class CheckpointValidation : public ::testing::Test {
 protected:
  // A checkpoint of small_spec() with Adam state, edited by `edit`, then loaded.
  std::string load_edited(const std::function<void(TensorFile&)>& edit) {
    const Registry registry = builtin_registry();
    Net net(small_spec(), registry, {{"x", Shape{2, 4}}}, DType::f32, Device::cpu(), 1);
    Adam adam(1e-3);
    save_checkpoint(folder / "c.safetensors", net, &adam, 7);
    TensorFile file = load_safetensors(folder / "c.safetensors");
    edit(file);
    save_safetensors(folder / "c.safetensors", file);
    return error_of<IoError>([&] { load_checkpoint(folder / "c.safetensors", net, &adam); });
  }
  ScratchFolder folder{"checkpoint-validation"};
};

TEST_F(CheckpointValidation, NonFiniteWeightsAreRefusedByName) {
  const std::string message = load_edited([](TensorFile& file) {
    Tensor weight = file.tensors.at("fc.weight").clone();
    weight.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    file.tensors["fc.weight"] = weight;
  });
  EXPECT_TRUE(contains(message, "tensor 'fc.weight' holds a non-finite value (nan at element 5)")) << message;
  const std::string infinite = load_edited([](TensorFile& file) {
    Tensor bias = file.tensors.at("fc.bias").clone();
    bias.data<float>()[0] = -std::numeric_limits<float>::infinity();
    file.tensors["fc.bias"] = bias;
  });
  EXPECT_TRUE(contains(infinite, "tensor 'fc.bias' holds a non-finite value (-inf at element 0)")) << infinite;
}

TEST_F(CheckpointValidation, StepCountsOutOfRangeAreRefused) {
  EXPECT_TRUE(contains(load_edited([](TensorFile& file) { file.metadata["step"] = "-5"; }),
                       "metadata \"step\" is '-5', not an integer in [0, 1125899906842624]"));
  EXPECT_TRUE(contains(load_edited([](TensorFile& file) { file.metadata["optimizer_steps"] = "9223372036854775806"; }),
                       "metadata \"optimizer_steps\" is '9223372036854775806', not an integer in [0, "));
  EXPECT_TRUE(contains(load_edited([](TensorFile& file) { file.metadata["step"] = "99999999999999999999"; }),
                       "not an integer in [0, "));
}

std::string u64_le(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

TEST(SafetensorsHeader, DuplicateTensorNamesAreReportedAsSuch) {
  ScratchFolder folder("duplicate");
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  testing::write_bytes(folder / "d.safetensors", u64_le(header.size()) + header + std::string(8, '\0'));
  const std::string message = error_of<IoError>([&] { load_safetensors(folder / "d.safetensors"); });
  EXPECT_TRUE(contains(message, "d.safetensors': the header names tensor 'a' twice")) << message;
}

// A safetensors file of `count` one-element F32 tensors "t0", "t1", ...
std::string many_tensor_file(std::int64_t count) {
  std::string header = "{";
  for (std::int64_t i = 0; i < count; ++i) {
    if (i > 0) header += ",";
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  return u64_le(header.size()) + header + std::string(static_cast<std::size_t>(4 * count), '\0');
}

TEST(SafetensorsHeader, AbsurdTensorCountsAreRefusedWithTheCountAndTheLimit) {
  ScratchFolder folder("many");
  testing::write_bytes(folder / "m.safetensors", many_tensor_file(100000));
  const std::string message = error_of<IoError>([&] { load_safetensors(folder / "m.safetensors"); });
  EXPECT_TRUE(contains(message, "m.safetensors': the header has 100000 tensor entries, more than the limit of " +
                                    std::to_string(limits::kMaxCheckpointTensors)))
      << message;
}

TEST(SafetensorsHeader, AHeaderAtTheTensorCountLimitLoads) {
  ScratchFolder folder("at-limit");
  testing::write_bytes(folder / "l.safetensors", many_tensor_file(limits::kMaxCheckpointTensors));
  const TensorFile file = load_safetensors(folder / "l.safetensors");
  EXPECT_EQ(static_cast<std::int64_t>(file.tensors.size()), limits::kMaxCheckpointTensors);
  EXPECT_EQ(file.tensors.at("t12345").shape(), Shape{1});
}

TEST(SafetensorsHeader, WritingMoreTensorsThanTheLimitIsRefused) {
  ScratchFolder folder("write-many");
  TensorFile file;
  const Tensor one(Shape{1});
  for (std::int64_t i = 0; i <= limits::kMaxCheckpointTensors; ++i) file.tensors["t" + std::to_string(i)] = one;
  const std::string message = error_of<IoError>([&] { save_safetensors(folder / "w.safetensors", file); });
  EXPECT_TRUE(contains(message, "w.safetensors': " + std::to_string(limits::kMaxCheckpointTensors + 1) +
                                    " tensors, more than the limit of " +
                                    std::to_string(limits::kMaxCheckpointTensors)))
      << message;
  EXPECT_FALSE(std::filesystem::exists(folder / "w.safetensors"));
}

TEST(SafetensorsHeader, ADuplicateAmongManyTensorsIsNamed) {
  ScratchFolder folder("late-duplicate");
  std::string bytes = many_tensor_file(1000);
  const std::string header_end = "}}";
  const std::size_t close = bytes.find(header_end, 8) + 1;  // after the last entry, before the header's '}'
  bytes.insert(close, R"(,"t417":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})");
  // The header grew: rewrite its length.
  const std::uint64_t header_size = bytes.size() - 8 - 4 * 1000;
  bytes.replace(0, 8, u64_le(header_size));
  testing::write_bytes(folder / "d.safetensors", bytes);
  const std::string message = error_of<IoError>([&] { load_safetensors(folder / "d.safetensors"); });
  EXPECT_TRUE(contains(message, "d.safetensors': the header names tensor 't417' twice")) << message;
}

TEST(SafetensorsHeader, DeepNestingIsRefusedBeforeItIsBuilt) {
  ScratchFolder folder("deep");
  const std::string header = R"({"a":)" + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  testing::write_bytes(folder / "n.safetensors", u64_le(header.size()) + header);
  const std::string message = error_of<IoError>([&] { load_safetensors(folder / "n.safetensors"); });
  EXPECT_TRUE(contains(message, "n.safetensors': the header nests arrays or objects more than 64 levels deep"))
      << message;
}

TEST(SafetensorsHeader, NumberTooLargeNamesTheFile) {
  ScratchFolder folder("overflow");
  const std::string header = R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})";
  testing::write_bytes(folder / "o.safetensors", u64_le(header.size()) + header + std::string(4, '\0'));
  const std::string message = error_of<IoError>([&] { load_safetensors(folder / "o.safetensors"); });
  EXPECT_TRUE(contains(message, "o.safetensors': the header is not valid JSON")) << message;
  EXPECT_TRUE(contains(message, "number overflow")) << message;
}

// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(AtomicFile, StaleTemporaryFilesOfDeadProcessesAreRemoved) {
  ScratchFolder folder("stale");
  const std::string dead = folder / ("checkpoint.safetensors" + temporary_suffix(dead_pid()));
  const std::string mine = folder / ("model.safetensors" + temporary_suffix(getpid()));
  const std::string parent = folder / ("eval.json" + temporary_suffix(getppid()));
  const std::string other = folder / "notes.tmp-abc";
  for (const auto& path : {dead, mine, parent, other}) testing::write_bytes(path, "x");
  const auto removed = remove_stale_temporary_files(folder.path());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], dead);
  EXPECT_FALSE(std::filesystem::exists(dead));
  for (const auto& path : {mine, parent, other}) EXPECT_TRUE(std::filesystem::exists(path)) << path;
}

// Runs `body` in a child process and returns its exit status; a death by
// signal fails the test.
int exit_status_of(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child == 0) _exit(body());
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(AtomicFile, AFullDiskIsAnErrorWithTheReasonAndKeepsTheOldFile) {
  ScratchFolder folder("full");
  testing::write_bytes(folder / "out.json", "old");
  // RLIMIT_FSIZE makes writes past 16 bytes fail (EFBIG), as a full disk does (ENOSPC).
  const int status = exit_status_of([&] {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{16, 16};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_file_atomically(folder / "out.json", std::string(4096, 'x'), "results");
    } catch (const IoError& e) {
      return contains(e.what(), "cannot write results '" + (folder / "out.json") + "'") &&
                     contains(e.what(), "File too large")
                 ? 42
                 : 1;
    }
    return 2;
  });
  EXPECT_EQ(status, 42);
  EXPECT_EQ(testing::read_bytes(folder / "out.json"), "old");
  for (const auto& entry : std::filesystem::directory_iterator(folder.path()))
    EXPECT_EQ(entry.path().filename(), "out.json") << "left behind: " << entry.path();
}

TEST(BatchLoader, ThreadsThatCannotStartAreAnErrorAndTheStartedOnesAreJoined) {
  ScratchFolder folder("threads");
  data::write_png(folder / "a.png", testing::position_image(8, 8));
  const int status = exit_status_of([&] {
    data::ImageFolder images(folder.path());
    // Address space for a few thread stacks only: creating thread ~10 fails.
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    statm >> pages;
    limit.rlim_cur = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + (std::size_t{80} << 20);
    setrlimit(RLIMIT_AS, &limit);
    try {
      data::BatchLoader loader(images, data::PatchSampler(1, 1, 4), 0, 200);
    } catch (const Error& e) {
      return contains(e.what(), "cannot start loader thread") && contains(e.what(), "of 200") ? 42 : 1;
    }
    return 2;
  });
  EXPECT_EQ(status, 42);  // not 134 (std::terminate) nor a signal
}

}  // namespace
}  // namespace plexus

// Data-parallel training through plexus-ae on the CPU: the worker launch
// and supervision (a worker that fails takes the run down, Ctrl-C stops and
// saves, resuming with another number of workers), and `--gpus 1 --device
// cpu`, which runs the whole data-parallel path (one worker process,
// gradient buckets, agreement, replica checks) and must train exactly the
// parameters of a single process. The supervisor is also driven directly
// with shell workers, to show that the other workers are killed. Where the
// build has MPI, `mpirun -np 2` runs the real multi-process path on the CPU.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "apps/metrics_log_reader.h"
#include "apps/same_tensors.h"
#include "data/data_test_support.h"
#include "plexus/context.h"
#include "plexus/distributed/mpi_communicator.h"
#include "plexus/error.h"
#include "plexus/distributed/nccl_communicator.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/train/exit_codes.h"
#include "plexus/train/worker_environment.h"
#include "plexus/train/worker_launch.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

#ifdef PLEXUS_MPIEXEC
const std::string kMpirun = PLEXUS_MPIEXEC;
#else
const std::string kMpirun;
#endif
constexpr const char* kNoMpiReason =
    "this build has no MPI (framework/CMakeLists.txt; Debian: libopenmpi-dev openmpi-bin)";
bool mpirun_available() { return distributed::built_with_mpi() && !kMpirun.empty(); }

// `mpirun -np ranks command...`. Open MPI's mpirun needs --oversubscribe to
// start more ranks than there are cores, and --allow-run-as-root where the
// suite runs as root (containers, CI); its shared-memory transport copies
// through a buffer instead of reading the peer's memory, which containers
// that forbid ptrace refuse.
std::vector<std::string> mpirun_arguments(int ranks, const std::vector<std::string>& command) {
  std::vector<std::string> args{"-np", std::to_string(ranks)};
  if (contains(distributed::mpi_version(), "Open MPI")) {
    args.insert(args.end(), {"--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none"});
    if (geteuid() == 0) args.push_back("--allow-run-as-root");
  }
  args.insert(args.end(), command.begin(), command.end());
  return args;
}
testing::CommandResult run_under_mpirun(int ranks, const std::vector<std::string>& command,
                                        const std::string& scratch) {
  return testing::Process(kMpirun, mpirun_arguments(ranks, command), scratch).wait();
}

class PlexusAeDataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "images/a.png", testing::position_image(48, 40));
    testing::save_png(folder / "images/b.png", testing::position_image(40, 52));
  }
  std::vector<std::string> tiny_run(const std::string& out, std::int64_t steps, std::vector<std::string> extra = {}) {
    return testing::tiny_train_args(folder / "images", folder / out, steps, std::move(extra));
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  // tiny_run on the GPU.
  std::vector<std::string> gpu_args(const std::string& out, std::int64_t steps, std::vector<std::string> extra) {
    auto args = tiny_run(out, steps, std::move(extra));
    args[std::find(args.begin(), args.end(), "--device") - args.begin() + 1] = "cuda";
    return args;
  }
  testing::CommandResult gpu_run(const std::string& out, std::int64_t steps, std::vector<std::string> extra) {
    return run(gpu_args(out, steps, std::move(extra)));
  }
  // tiny_run of the noiseless tiny model (below) with `batch` crops per rank.
  std::vector<std::string> noiseless_run(const std::string& out, std::int64_t steps, const std::string& batch,
                                         std::vector<std::string> extra = {}) {
    auto args = tiny_run(out, steps, std::move(extra));
    args[std::find(args.begin(), args.end(), "--model") - args.begin() + 1] = noiseless_tiny_model();
    args[std::find(args.begin(), args.end(), "--batch") - args.begin() + 1] = batch;
    return args;
  }
  testing::CommandResult mpirun(int ranks, const std::vector<std::string>& command) {
    return run_under_mpirun(ranks, command, folder.path());
  }
  // The tiny model without its quantisation noise, which ranks other than 0
  // draw from streams of their own (docs/multi-gpu.md): without it, 2 ranks
  // of 2 crops train exactly the steps of 1 process of 4.
  std::string noiseless_tiny_model() {
    nlohmann::json spec = nlohmann::json::parse(testing::read_bytes(testing::test_model("tiny.json")));
    nlohmann::json nodes = nlohmann::json::array();
    for (auto node : spec["nodes"]) {
      if (node["type"] == "UniformNoise") continue;
      for (auto& input : node["inputs"])
        if (input == "y_hat") input = "y";
      nodes.push_back(node);
    }
    spec["nodes"] = nodes;
    const std::string path = folder / "tiny_noiseless.json";
    std::ofstream(path) << spec.dump();
    return path;
  }
  ScratchFolder folder{"ae-data-parallel"};
};

// 23 steps cross the first agreement point (step 10) and replica checks
// (every 5): the checkpoints (parameters and Adam moments) are bit-identical.
TEST_F(PlexusAeDataParallel, OneCpuWorkerTrainsExactlyWhatOneProcessTrains) {
  auto single = run(tiny_run("single", 23));
  ASSERT_EQ(single.exit_code, 0) << single.describe();
  // Buckets of 1 KiB: the tiny model's gradients are reduced in several.
  auto worker =
      run(tiny_run("worker", 23, {"--gpus", "1", "--replica-check-every", "5", "--gradient-bucket-mb", "0.001"}));
  ASSERT_EQ(worker.exit_code, 0) << worker.describe();
  EXPECT_TRUE(contains(worker.err, "started 1 worker(s)")) << worker.err;
  EXPECT_TRUE(contains(worker.err, "data-parallel rank 0 of 1 on cpu (in-process)")) << worker.err;
  EXPECT_TRUE(
      testing::same_tensors(folder / "single/checkpoint.safetensors", folder / "worker/checkpoint.safetensors"));
  EXPECT_TRUE(testing::same_tensors(folder / "single/model.safetensors", folder / "worker/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(folder / "worker/.rendezvous-0"));
  for (const auto& entry : std::filesystem::directory_iterator(folder / "worker"))
    EXPECT_EQ(entry.path().filename().string().rfind(".rendezvous", 0), std::string::npos) << entry.path();
}

// On a GPU, through NCCL: one worker (gradients reduced in buckets on
// NCCL's stream, the all-reduces recorded into the step's CUDA graph), and
// the same worker launching each step eagerly, against one process (CUDA
// graph). Averaging over one rank changes nothing: tolerance 1e-6
// absolute, expected 0.
TEST_F(PlexusAeDataParallel, OneGpuWorkerTrainsWhatOneGpuProcessTrains) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  if (!distributed::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL (see framework/CMakeLists.txt)";
  auto single = gpu_run("gpu-single", 23, {});
  ASSERT_EQ(single.exit_code, 0) << single.describe();
  EXPECT_TRUE(contains(single.err, "CUDA graph on")) << single.err;
  for (const std::string graph : {"on", "off"}) {
    const std::string out = "gpu-worker-graph-" + graph;
    auto worker = gpu_run(out, 23, {"--gpus", "1", "--replica-check-every", "5", "--cuda-graph", graph});
    ASSERT_EQ(worker.exit_code, 0) << worker.describe();
    EXPECT_TRUE(contains(worker.err, "data-parallel rank 0 of 1 on cuda:0 (nccl ")) << worker.err;
    EXPECT_EQ(contains(worker.err, "CUDA graph on"), graph == "on") << worker.err;
    const double largest = testing::largest_difference(folder / "gpu-single/checkpoint.safetensors",
                                                       folder / (out + "/checkpoint.safetensors"));
    std::printf("--gpus 1 (CUDA graph %s) against one process on the GPU: largest checkpoint difference %g\n",
                graph.c_str(), largest);
    EXPECT_LE(largest, 1e-6) << "CUDA graph " << graph;
  }
}

// Two GPUs: the steps replayed from a CUDA graph (the bucket all-reduces
// recorded with them) train what eager steps train, across agreement points
// and replica checks. Tolerance 1e-6 absolute, expected 0: the same kernels
// and collectives in the same order. Skipped without two GPUs and NCCL.
TEST_F(PlexusAeDataParallel, TwoGpuWorkersTrainAlikeWithAndWithoutTheCudaGraph) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  if (!distributed::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL (see framework/CMakeLists.txt)";
  const std::vector<std::string> two_gpus{"--gpus", "2", "--replica-check-every", "5"};
  auto graph = gpu_run("two-graph", 23, two_gpus);
  if (graph.exit_code != 0 && contains(graph.err, "GPU(s) are visible")) GTEST_SKIP() << "fewer than 2 GPUs here";
  ASSERT_EQ(graph.exit_code, 0) << graph.describe();
  EXPECT_TRUE(contains(graph.err, "started 2 worker(s)")) << graph.err;
  EXPECT_TRUE(contains(graph.err, "CUDA graph on")) << graph.err;
  auto args = two_gpus;
  args.insert(args.end(), {"--cuda-graph", "off"});
  auto eager = gpu_run("two-eager", 23, args);
  ASSERT_EQ(eager.exit_code, 0) << eager.describe();
  EXPECT_FALSE(contains(eager.err, "CUDA graph on")) << eager.err;
  const double largest = testing::largest_difference(folder / "two-graph/checkpoint.safetensors",
                                                     folder / "two-eager/checkpoint.safetensors");
  std::printf("--gpus 2, CUDA graph on against off: largest checkpoint difference %g\n", largest);
  EXPECT_LE(largest, 1e-6);
}

// A listener on 127.0.0.1 at a port the system chose, held while it lives
// (torchrun's agent, in the tests below, holds MASTER_PORT so).
class HeldPort {
 public:
  HeldPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("no port for the test");
    port_ = ntohs(address.sin_port);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  ~HeldPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

// A port that was free a moment ago.
int free_port() { return HeldPort().port(); }

bool port_is_free(int port) {
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool free = port < 65536 && ::bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(probe);
  return free;
}

// torchrun's variables for one rank on 127.0.0.1, set while it lives.
class TorchrunVariables {
 public:
  TorchrunVariables(int rank, int local_rank, int world_size, int master_port, bool agent_store = false) {
    set("RANK", std::to_string(rank));
    set("LOCAL_RANK", std::to_string(local_rank));
    set("WORLD_SIZE", std::to_string(world_size));
    set("MASTER_ADDR", "127.0.0.1");
    set("MASTER_PORT", std::to_string(master_port));
    if (agent_store) set("TORCHELASTIC_USE_AGENT_STORE", "True");
  }
  TorchrunVariables(const TorchrunVariables&) = delete;
  TorchrunVariables& operator=(const TorchrunVariables&) = delete;
  ~TorchrunVariables() {
    for (const std::string& name : names_) unsetenv(name.c_str());
  }

 private:
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    names_.push_back(name);
  }
  std::vector<std::string> names_;
};

// torchrun's variables on one GPU, no PLEXUS_RENDEZVOUS: NCCL's id goes
// through the TCP rendezvous (rank 0 alone listens at MASTER_PORT), and the
// rank trains what one process trains (tolerance 1e-6, expected 0, as for
// --gpus 1). A rank 1 whose rank 0 never comes stops after --rank-timeout,
// naming the address it tried.
TEST_F(PlexusAeDataParallel, OneGpuTorchrunRankTrainsWhatOneGpuProcessTrains) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  if (!distributed::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL (see framework/CMakeLists.txt)";
  auto single = gpu_run("torchrun-single", 23, {});
  ASSERT_EQ(single.exit_code, 0) << single.describe();
  const int port = free_port();
  testing::CommandResult rank;
  {
    TorchrunVariables torchrun(0, 0, 1, port);
    rank = gpu_run("torchrun-rank", 23, {"--replica-check-every", "5"});
  }
  ASSERT_EQ(rank.exit_code, 0) << rank.describe();
  EXPECT_TRUE(contains(rank.err, "data-parallel rank 0 of 1 on cuda:0 (nccl ")) << rank.err;
  EXPECT_TRUE(contains(rank.err, ", id through the TCP rendezvous at 127.0.0.1:" + std::to_string(port) +
                                     "), local rank 0, started by torchrun"))
      << rank.err;
  const double largest = testing::largest_difference(folder / "torchrun-single/checkpoint.safetensors",
                                                     folder / "torchrun-rank/checkpoint.safetensors");
  std::printf("torchrun's variables, world of 1, against one process on the GPU: largest checkpoint difference %g\n",
              largest);
  EXPECT_LE(largest, 1e-6);

  const int nobody = free_port();
  testing::CommandResult lonely;
  {
    TorchrunVariables torchrun(1, 0, 2, nobody);
    lonely = gpu_run("torchrun-lonely", 5, {"--rank-timeout", "2"});
  }
  EXPECT_EQ(lonely.exit_code, 1) << lonely.describe();
  EXPECT_TRUE(contains(
      lonely.err, "rank 1 of 2 could not reach the rendezvous at 127.0.0.1:" + std::to_string(nobody) + " within 2 s"))
      << lonely.err;
}

// Two plexus-ae processes started as torchrun starts them (RANK,
// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; a listener of the test
// stands in for torchrun's agent, which holds MASTER_PORT and says so with
// TORCHELASTIC_USE_AGENT_STORE=True) meet through the TCP rendezvous on
// MASTER_PORT + 1 and train what `--gpus 2` trains: tolerance 1e-6, expected
// 0 (the same kernels and collectives). Skipped without two GPUs.
TEST_F(PlexusAeDataParallel, TwoGpuTorchrunRanksTrainWhatTwoWorkersTrain) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  if (!distributed::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL (see framework/CMakeLists.txt)";
  const std::vector<std::string> options{"--replica-check-every", "5"};
  auto workers = gpu_run("two-workers", 23, {"--gpus", "2", "--replica-check-every", "5"});
  if (workers.exit_code != 0 && contains(workers.err, "GPU(s) are visible")) GTEST_SKIP() << "fewer than 2 GPUs here";
  ASSERT_EQ(workers.exit_code, 0) << workers.describe();
  // The agent's port, with the port after it free a moment ago.
  std::unique_ptr<HeldPort> agent;
  for (int attempt = 0; attempt < 20 && !agent; ++attempt) {
    agent = std::make_unique<HeldPort>();
    if (!port_is_free(agent->port() + 1)) agent.reset();
  }
  ASSERT_TRUE(agent) << "no port with a free port after it";
  std::vector<std::unique_ptr<testing::Process>> ranks;
  for (const int rank : {1, 0}) {  // rank 1 first: it waits for rank 0
    TorchrunVariables torchrun(rank, rank, 2, agent->port(), true);
    ranks.push_back(
        std::make_unique<testing::Process>(PLEXUS_AE_EXECUTABLE, gpu_args("two-torchrun", 23, options), folder.path()));
  }
  const auto rank1 = ranks[0]->wait(), rank0 = ranks[1]->wait();
  ASSERT_EQ(rank0.exit_code, 0) << rank0.describe();
  ASSERT_EQ(rank1.exit_code, 0) << rank1.describe();
  EXPECT_TRUE(contains(rank0.err, "data-parallel rank 0 of 2 on cuda:0 (nccl ")) << rank0.err;
  EXPECT_TRUE(contains(rank0.err, ", id through the TCP rendezvous at 127.0.0.1:" + std::to_string(agent->port() + 1)))
      << rank0.err;
  const double largest = testing::largest_difference(folder / "two-workers/checkpoint.safetensors",
                                                     folder / "two-torchrun/checkpoint.safetensors");
  std::printf("two ranks with torchrun's variables against --gpus 2: largest checkpoint difference %g\n", largest);
  EXPECT_LE(largest, 1e-6);
}

TEST_F(PlexusAeDataParallel, AWorkerThatFailsEndsTheRunNamingItsRank) {
  std::filesystem::create_directories(folder / "empty");
  auto result = run({"train", "--data", folder / "empty", "--model", testing::test_model("tiny.json"), "--patch", "16",
                     "--steps", "5", "--device", "cpu", "--gpus", "1", "--out", folder / "failed"});
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "rank 0: ")) << result.err;  // the worker's own message
  EXPECT_TRUE(contains(result.err, "worker rank 0 of 1 (pid ")) << result.err;
  EXPECT_TRUE(contains(result.err, "exited with status 1")) << result.err;
}

// Ctrl-C reaches the supervisor; the workers stop at an agreed step, rank 0
// saves, everything exits 130. The run then resumes as a single process
// (another number of workers) and ends where an uninterrupted run ends.
TEST_F(PlexusAeDataParallel, CtrlCStopsTheWorkersAndTheRunResumesWithAnotherWorkerCount) {
  testing::Process process(PLEXUS_AE_EXECUTABLE, tiny_run("stopped", 100000, {"--gpus", "1", "--log-every", "1"}),
                           folder.path());
  ASSERT_TRUE(testing::wait_until(
      [&] { return std::filesystem::exists(folder / "stopped/metrics.jsonl") || !process.running(); }, 120))
      << "no progress within 120 s";
  process.send(SIGINT);
  auto result = process.wait();
  ASSERT_EQ(result.exit_code, 130) << result.describe();
  EXPECT_TRUE(contains(result.err, "interrupted by Ctrl-C (SIGINT) after step")) << result.err;
  ASSERT_TRUE(std::filesystem::exists(folder / "stopped/checkpoint.safetensors"));
  // Stopped at an agreement point (the first is step 10), where the
  // metrics log's last line was written.
  std::ifstream in(folder / "stopped/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const std::int64_t stopped = nlohmann::json::parse(last)["step"];
  EXPECT_GE(stopped, 10) << last;
  EXPECT_TRUE(contains(result.err, "after step " + std::to_string(stopped) + " of")) << result.err;

  const std::string total = std::to_string(stopped + 3);
  auto resumed = run({"train", "--out", folder / "stopped", "--resume", "--steps", total, "--device", "cpu"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  auto straight = run(tiny_run("straight", stopped + 3));
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  EXPECT_TRUE(testing::same_tensors(folder / "stopped/model.safetensors", folder / "straight/model.safetensors"));
}

TEST_F(PlexusAeDataParallel, RefusesWorkerCountsItCannotRun) {
  auto cpu = run(tiny_run("cpu2", 5, {"--gpus", "2"}));
  EXPECT_EQ(cpu.exit_code, 1) << cpu.describe();
  EXPECT_TRUE(contains(cpu.err, "--gpus 2 with --device cpu")) << cpu.err;
  auto pinned = run({"train", "--data", folder / "images", "--gpus", "2", "--device", "cuda:0", "--out", folder / "x"});
  EXPECT_EQ(pinned.exit_code, 1) << pinned.describe();
  EXPECT_TRUE(contains(pinned.err, "give --device auto or cuda, not 'cuda:0'")) << pinned.err;
  auto no_timeout = run(tiny_run("no-timeout", 5, {"--gpus", "1", "--rank-timeout", "0"}));
  EXPECT_EQ(no_timeout.exit_code, 1) << no_timeout.describe();
  EXPECT_TRUE(contains(no_timeout.err, "--rank-timeout must be > 0 seconds, got 0")) << no_timeout.err;
  for (const std::string bucket : {"0", "-1", "2048", "nan"}) {
    auto bad_bucket = run(tiny_run("bucket", 5, {"--gpus", "1", "--gradient-bucket-mb", bucket}));
    EXPECT_EQ(bad_bucket.exit_code, 1) << bad_bucket.describe();
    EXPECT_TRUE(contains(bad_bucket.err, "--gradient-bucket-mb must be in [0.0009765625, 1024] MiB, got"))
        << bad_bucket.err;
  }
  auto negative = run(tiny_run("negative", 5, {"--gpus", "-1"}));
  EXPECT_EQ(negative.exit_code, 1) << negative.describe();
  EXPECT_TRUE(contains(negative.err, "--gpus must be in [0, 64]")) << negative.err;
}

// Two GPUs asked for where this build or machine cannot give them: without
// NCCL the message says to install it; with NCCL and fewer than 2 GPUs it
// says how many are visible. A machine with 2 GPUs and NCCL trains.
TEST_F(PlexusAeDataParallel, TwoGpusWithoutNcclOrWithoutTwoGpusIsAClearError) {
  auto result = run({"train", "--data", folder / "images", "--model", testing::test_model("tiny.json"), "--patch", "16",
                     "--steps", "2", "--gpus", "2", "--out", folder / "two"});
  if (result.exit_code == 0) {  // nothing to refuse here
    EXPECT_TRUE(distributed::built_with_nccl());
    EXPECT_TRUE(contains(result.err, "started 2 worker(s)")) << result.err;
    EXPECT_TRUE(std::filesystem::exists(folder / "two/model.safetensors"));
    return;
  }
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  if (distributed::built_with_nccl())
    EXPECT_TRUE((contains(result.err, "requested, but") && contains(result.err, "CUDA GPU(s) are visible")) ||
                contains(result.err, "built without CUDA"))
        << result.err;
  else EXPECT_TRUE(contains(result.err, "--gpus 2 needs NCCL, and this build of plexus-ae has none")) << result.err;
  EXPECT_FALSE(contains(result.err, "started 2 worker(s)")) << result.err;
}

TEST_F(PlexusAeDataParallel, AnIncompleteWorkerEnvironmentIsNamed) {
  setenv(train::kRankVariable, "0", 1);
  auto result = run(tiny_run("env", 5));
  unsetenv(train::kRankVariable);
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "PLEXUS_WORLD_SIZE is not set, but PLEXUS_RANK is")) << result.err;
}

// The real multi-process path on the CPU: `mpirun -np 2`, 2 crops per rank,
// gradients averaged through MPI_Iallreduce, against one process with 4
// crops. The logged losses (each the mean over the global batch) agree to
// 1e-6 relative: they differ only by the order of the sums (a batch of 4,
// against two batches of 2 averaged) and the f32 all-reduce that averages
// the ranks' logged means (measured: 6e-8). The parameters are not compared
// at that tolerance: Adam divides each gradient by its own root mean
// square, so where a gradient is near zero (IGDN's gamma at its bound) a
// rounding difference becomes a step of up to the learning rate.
TEST_F(PlexusAeDataParallel, TwoMpiRanksLogTheLossesOfOneProcessWithTheDoubledBatch) {
  if (!mpirun_available()) GTEST_SKIP() << kNoMpiReason;
  auto one = run(noiseless_run("one-process", 8, "4", {"--log-every", "1"}));
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  auto ranks = noiseless_run("two-ranks", 8, "2", {"--log-every", "1"});
  ranks.insert(ranks.begin(), PLEXUS_AE_EXECUTABLE);
  auto two = mpirun(2, ranks);
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  EXPECT_TRUE(contains(two.err, "data-parallel rank 0 of 2 on cpu (mpi ")) << two.err;
  EXPECT_TRUE(contains(two.err, "started by Open MPI") || contains(two.err, "started by MPICH")) << two.err;
  EXPECT_TRUE(contains(two.err, "on 2 CPU ranks")) << two.err;
  const auto expected = testing::read_metrics(folder / "one-process/metrics.jsonl", "train");
  const auto got = testing::read_metrics(folder / "two-ranks/metrics.jsonl", "train");
  ASSERT_EQ(expected.size(), 8u);
  ASSERT_EQ(got.size(), expected.size());
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["step"], expected[i]["step"]);
    for (const char* key : {"loss", "mse", "bpp"}) {
      const double a = expected[i][key], b = got[i][key];
      const double relative = std::abs(a - b) / std::max(std::abs(a), 1e-12);
      largest = std::max(largest, relative);
      EXPECT_LE(relative, 1e-6) << key << " at step " << expected[i]["step"] << ": " << a << " against " << b;
    }
  }
  std::printf("mpirun -np 2 against one process with the doubled batch: largest relative loss difference %g\n",
              largest);
  EXPECT_TRUE(std::filesystem::exists(folder / "two-ranks/model.safetensors"));
}

// The shell that mpirun starts as rank 1 runs the worker in the background,
// waits until rank 0 has logged a step, then does `action` to it ($p).
std::vector<std::string> rank_one_wrapper(const std::string& metrics, const std::string& action) {
  const std::string script = "r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; if [ \"$r\" = 1 ]; then \"$0\" \"$@\" & p=$!; n=0; "
                             "until [ -s " +
                             metrics + " ] || [ $n -ge 600 ]; do sleep 0.05; n=$((n+1)); done; " + action +
                             "; fi; exec \"$0\" \"$@\"";
  return {"/bin/sh", "-c", script, PLEXUS_AE_EXECUTABLE};
}

// Rank 1 is killed (SIGKILL) while the ranks train: the launcher ends the
// job within seconds, with a non-zero exit and a message naming rank 1.
TEST_F(PlexusAeDataParallel, AKilledMpiRankEndsTheJobNamingIt) {
  if (!mpirun_available()) GTEST_SKIP() << kNoMpiReason;
  auto command = rank_one_wrapper(folder / "killed/metrics.jsonl", "kill -9 $p; kill -9 $$");
  auto train = noiseless_run("killed", 100000, "2", {"--log-every", "1"});
  command.insert(command.end(), train.begin(), train.end());
  const auto start = std::chrono::steady_clock::now();
  auto result = mpirun(2, command);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.describe();
  EXPECT_LT(seconds, 60.0) << result.describe();
  EXPECT_TRUE(contains(result.err, "step ") || contains(result.out, "step "))
      << "rank 0 did train: " << result.describe();
  // Open MPI: "mpirun noticed that process rank 1 with PID ... exited on signal 9 (Killed)".
  const bool open_mpi = contains(distributed::mpi_version(), "Open MPI");
  EXPECT_TRUE(contains(result.out + result.err, open_mpi ? "process rank 1 with PID" : "rank 1")) << result.describe();
}

// Rank 1 stops (SIGSTOP: alive, but never reaches the next all-reduce):
// rank 0 waits --rank-timeout, says so naming itself, and ends the job.
TEST_F(PlexusAeDataParallel, AnMpiRankThatHangsEndsTheJobAfterTheTimeout) {
  if (!mpirun_available()) GTEST_SKIP() << kNoMpiReason;
  auto command = rank_one_wrapper(folder / "hung/metrics.jsonl", "kill -STOP $p; wait $p; exit $?");
  auto train = noiseless_run("hung", 100000, "2", {"--log-every", "1", "--rank-timeout", "2"});
  command.insert(command.end(), train.begin(), train.end());
  const auto start = std::chrono::steady_clock::now();
  auto result = mpirun(2, command);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.describe();
  EXPECT_LT(seconds, 60.0) << result.describe();
  EXPECT_TRUE(contains(result.err, "rank 0: MPI, rank 0 of 2 on ")) << result.describe();
  EXPECT_TRUE(contains(result.err, "waited more than 2 s (--rank-timeout) for all_reduce")) << result.describe();
}

// The scheduler's SIGTERM (SLURM sends it to every task at the time limit)
// reaches both ranks of `mpirun -np 2` (3 crops each): they stop after an
// agreed step, rank 0 saves, and the run resumes as one process with 6
// crops and as 3 ranks with 2, which log the same losses (1e-6 relative,
// as above: the noiseless model, the same 6 crops a step).
TEST_F(PlexusAeDataParallel, SigtermToEveryMpiRankSavesAndTheRunResumesOnOneAndOnThreeRanks) {
  if (!mpirun_available()) GTEST_SKIP() << kNoMpiReason;
  // Each rank's shell writes its pid, then becomes the worker (exec keeps the pid).
  const std::string pids = folder / "pid-";
  std::vector<std::string> command{"/bin/sh", "-c",
                                   "echo $$ > " + pids + "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; exec \"$0\" \"$@\"",
                                   PLEXUS_AE_EXECUTABLE};
  const auto train = noiseless_run("stopped", 100000, "3", {"--log-every", "1"});
  command.insert(command.end(), train.begin(), train.end());
  testing::Process job(kMpirun, mpirun_arguments(2, command), folder.path());
  ASSERT_TRUE(testing::wait_until(
      [&] {
        return !job.running() || (std::filesystem::exists(folder / "stopped/metrics.jsonl") &&
                                  std::filesystem::exists(pids + "0") && std::filesystem::exists(pids + "1"));
      },
      120))
      << "no progress within 120 s";
  for (const std::string rank : {"0", "1"}) kill(std::stoi(testing::read_bytes(pids + rank)), SIGTERM);
  auto stopped = job.wait();
  EXPECT_NE(stopped.exit_code, 0) << stopped.describe();
  ASSERT_TRUE(contains(stopped.err, "interrupted by SIGTERM after step ")) << stopped.describe();
  ASSERT_TRUE(std::filesystem::exists(folder / "stopped/checkpoint.safetensors"));
  const std::int64_t step = testing::read_metrics(folder / "stopped/metrics.jsonl", "train").back()["step"];
  EXPECT_GE(step, 10);  // the first agreement point
  EXPECT_TRUE(contains(stopped.err, "after step " + std::to_string(step) + " of")) << stopped.err;

  const std::string total = std::to_string(step + 3);
  for (const std::string out : {"one", "three"}) std::filesystem::copy(folder / "stopped", folder / out);
  auto resume = [&](const std::string& out, const std::string& batch) {
    return std::vector<std::string>{"train", "--out",    folder / out, "--resume",  "--steps", total,         "--batch",
                                    batch,   "--device", "cpu",        "--threads", "1",       "--log-every", "1"};
  };
  auto one = run(resume("one", "6"));
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  auto three_args = resume("three", "2");
  three_args.insert(three_args.begin(), PLEXUS_AE_EXECUTABLE);
  auto three = mpirun(3, three_args);
  ASSERT_EQ(three.exit_code, 0) << three.describe();
  EXPECT_TRUE(contains(three.err, "data-parallel rank 0 of 3 on cpu (mpi ")) << three.err;
  const auto expected = testing::read_metrics(folder / "one/metrics.jsonl", "train");
  const auto got = testing::read_metrics(folder / "three/metrics.jsonl", "train");
  ASSERT_EQ(got.size(), expected.size());
  ASSERT_EQ(expected.back()["step"], step + 3);
  for (std::size_t i = expected.size() - 3; i < expected.size(); ++i) {
    const double a = expected[i]["loss"], b = got[i]["loss"];
    EXPECT_LE(std::abs(a - b) / std::abs(a), 1e-6) << "step " << expected[i]["step"] << ": " << a << " against " << b;
  }
}

// Without an MPI launch, several CPU ranks are refused with a reason; and
// --gpus N under a launcher that started a world of another size.
TEST_F(PlexusAeDataParallel, LaunchesThatCannotTrainAreNamed) {
  setenv("RANK", "0", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  auto torchrun_cpu = run(tiny_run("torchrun-cpu", 5));
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE"}) unsetenv(name);
  EXPECT_EQ(torchrun_cpu.exit_code, 1) << torchrun_cpu.describe();
  EXPECT_TRUE(contains(torchrun_cpu.err, "--device cpu in a data-parallel job of 2 ranks (rank 0 of 2 (local rank "
                                         "0), started by torchrun)"))
      << torchrun_cpu.err;
  EXPECT_TRUE(contains(torchrun_cpu.err, distributed::built_with_mpi() ? "not torchrun" : "this build has none"))
      << torchrun_cpu.err;

  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  auto gpus = run(tiny_run("gpus-under-mpirun", 5, {"--gpus", "2"}));
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"})
    unsetenv(name);
  EXPECT_EQ(gpus.exit_code, 1) << gpus.describe();
  EXPECT_TRUE(contains(gpus.err, "--gpus 2, but this process is rank 0 of 1 (local rank 0), started by Open MPI: "
                                 "--gpus starts workers of its own"))
      << gpus.err;
}

// The MPI communicator itself, on 2 ranks: run outside mpirun, the test
// starts this test binary (this test only) under `mpirun -np 2`, and the
// ranks check sums and means of f32 and f64 buffers, broadcasts from rank
// 1, raw bytes and the errors for bad buffers. Each rank holds (rank + 1)
// times the same values, so the sums are 3 times and the means 1.5 times them.
TEST(MpiCommunicator, SumsAveragesAndBroadcastsOnTwoRanks) {
  if (!mpirun_available()) GTEST_SKIP() << kNoMpiReason;
  const auto environment = train::worker_environment();
  if (!environment) {
    ScratchFolder folder("mpi-communicator");
    auto result =
        run_under_mpirun(2,
                         {std::filesystem::read_symlink("/proc/self/exe").string(),
                          "--gtest_filter=MpiCommunicator.SumsAveragesAndBroadcastsOnTwoRanks", "--gtest_color=no"},
                         folder.path());
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    int passed = 0;  // one line from each rank
    for (std::size_t at = 0; (at = result.out.find("[  PASSED  ] 1 test", at)) != std::string::npos; ++at) ++passed;
    EXPECT_EQ(passed, 2) << result.describe();
    return;
  }
  ASSERT_EQ(environment->world_size, 2);
  auto mpi = distributed::make_mpi_communicator({environment->rank, 2, 30});
  EXPECT_EQ(mpi->kind(), "mpi");
  Context ctx;
  const double own = mpi->rank() + 1;
  const std::vector<double> values{0.1, -2.5, 1e-3, 7};
  auto scaled = [&](double factor) {
    std::vector<double> out;
    for (double v : values) out.push_back(v * factor);
    return out;
  };
  for (const DType dtype : {DType::f32, DType::f64}) {
    const double tolerance = dtype == DType::f32 ? 1e-6 : 1e-15;
    Tensor sum = Tensor::from_values(scaled(own), {4}, dtype);
    mpi->all_reduce(ctx, sum, distributed::Reduction::sum);
    Tensor mean = Tensor::from_values(scaled(own), {2, 2}, dtype);
    mpi->all_reduce(ctx, mean, distributed::Reduction::average);
    Tensor root = Tensor::from_values(scaled(own), {4}, dtype);
    mpi->broadcast(ctx, root, 1);
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(sum.to_values()[i], 3 * values[i], tolerance * 3 * std::abs(values[i])) << i;
      EXPECT_NEAR(mean.to_values()[i], 1.5 * values[i], tolerance * 1.5 * std::abs(values[i])) << i;
      EXPECT_EQ(root.to_values()[i], Tensor::from_values(scaled(2), {4}, dtype).to_values()[i]) << i;
    }
  }
  std::uint64_t id = mpi->rank() == 0 ? 0x0123456789abcdefULL : 0;
  mpi->broadcast_bytes(&id, sizeof id, 0);
  EXPECT_EQ(id, 0x0123456789abcdefULL);
  Tensor bf16({4}, DType::bf16);
  EXPECT_THROW(mpi->all_reduce(ctx, bf16, distributed::Reduction::sum), ConfigError);
  Tensor f32({4});
  EXPECT_THROW(mpi->broadcast(ctx, f32, 2), ConfigError);
  mpi->barrier();
}

// The supervisor with three shell workers: rank 1 exits with status 3 at
// once, ranks 0 and 2 would sleep for 60 s. The run must end within seconds
// (so the sleepers were killed), with an error naming rank 1 and its status.
TEST(WorkerSupervisor, AFailedWorkerTakesTheOthersDown) {
  ScratchFolder folder("supervisor");
  testing::LogCapture log;
  const auto start = std::chrono::steady_clock::now();
  const int code = train::supervise_workers(
      {"/bin/sh", "-c", "if [ \"$PLEXUS_RANK\" = 1 ]; then exit 3; fi; exec sleep 60"}, 3, folder / "rendezvous");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(code, train::kExitError);
  EXPECT_LT(seconds, 20.0);
  EXPECT_TRUE(contains(log.text(), "worker rank 1 of 3")) << log.text();
  EXPECT_TRUE(contains(log.text(), "exited with status 3")) << log.text();
}

// Each worker sees its rank, the world size and the rendezvous path.
TEST(WorkerSupervisor, GivesEachWorkerItsRankAndTheRendezvousFile) {
  ScratchFolder folder("supervisor-env");
  const std::string script =
      "echo \"$PLEXUS_RANK $PLEXUS_WORLD_SIZE $PLEXUS_RENDEZVOUS\" > " + folder.path() + "/rank-$PLEXUS_RANK";
  EXPECT_EQ(train::supervise_workers({"/bin/sh", "-c", script}, 2, folder / "meet"), train::kExitOk);
  for (int rank : {0, 1})
    EXPECT_EQ(testing::read_bytes(folder / ("rank-" + std::to_string(rank))),
              std::to_string(rank) + " 2 " + (folder / "meet") + "\n");
}

// Ctrl-C while the workers start: rank 0 has its handler and stops as a
// trained worker does (exit 130); rank 1 has none yet and dies of the
// passed-on SIGINT. Both count as stopped: the run ends 130, not as an error.
TEST(WorkerSupervisor, CtrlCWhileAWorkerIsStillStartingIsAStopNotAFailure) {
  ScratchFolder folder("supervisor-stop");
  testing::LogCapture log;
  const std::string started = folder.path() + "/started-";
  const std::string script = "if [ \"$PLEXUS_RANK\" = 0 ]; then trap 'kill $!; exit 130' INT; touch " + started +
                             "0; sleep 60 & wait; exit 0; fi; touch " + started + "1; exec sleep 60";
  // The supervisor's handler is in place before it starts any worker, so
  // once both workers have written their file this SIGINT reaches it.
  std::thread ctrl_c([&] {
    testing::wait_until(
        [&] { return std::filesystem::exists(started + "0") && std::filesystem::exists(started + "1"); }, 20);
    kill(getpid(), SIGINT);
  });
  const auto start = std::chrono::steady_clock::now();
  const int code = train::supervise_workers({"/bin/sh", "-c", script}, 2, folder / "meet");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ctrl_c.join();
  EXPECT_EQ(code, train::kExitInterrupted) << log.text();
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE(contains(log.text(), "worker rank 1 of 2 (pid ")) << log.text();
  EXPECT_TRUE(contains(log.text(), "was stopped while starting, before its first step")) << log.text();
  EXPECT_FALSE(contains(log.text(), "worker rank 0 of 2")) << log.text();  // it stopped as asked: nothing to say
  EXPECT_FALSE(contains(log.text(), "stopping the other rank(s)")) << log.text();
}

}  // namespace
}  // namespace plexus

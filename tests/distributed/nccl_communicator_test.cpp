// The NCCL communicator on one GPU (world size 1): the collectives, the
// data-parallel step through NCCL against the plain step, and a missing rank
// that must end in an error within the timeout, not a hang. Skipped (with
// the reason) without a GPU or without NCCL in the build. The TCP rendezvous
// that carries NCCL's id under torchrun runs on the CPU: ranks on threads
// meeting on 127.0.0.1, at ports the system chose.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "data/data_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/nccl_communicator.h"
#include "plexus/distributed/replicas.h"
#include "plexus/grad_clip.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/step_graph.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::distributed {
namespace {

using testing::ScratchFolder;

// Why these tests cannot run here, or "" when they can.
std::string skip_reason() {
  if (!cuda_available()) return testing::kNoGpuReason;
  if (!built_with_nccl()) return "this build has no NCCL (see framework/CMakeLists.txt)";
  return "";
}

const Registry registry = builtin_registry();
constexpr int kBatch = 4, kPatch = 32;

NcclSetup world_of_one(const ScratchFolder& folder, double timeout = 60) {
  NcclSetup setup;
  setup.rendezvous_file = folder / "rendezvous";
  setup.timeout_seconds = timeout;
  return setup;
}

ModelSpec conv_spec() {
  ModelSpec spec;
  spec.name = "tiny_conv";
  spec.add_input("image")
      .add_node(
          {"encode", "Conv2d", {"image"}, {"y"}, {{"out_channels", 8}, {"kernel", 5}, {"stride", 2}, {"padding", 2}}})
      .add_node({"relu", "ReLU", {"y"}, {"a"}, {}})
      .add_node({"decode",
                 "ConvTranspose2d",
                 {"a"},
                 {"x_hat"},
                 {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}}})
      .add_node({"mse", "MSELoss", {"x_hat", "image"}, {"loss"}, {}});
  return spec;
}

std::vector<double> batch_values(int step) {
  std::mt19937_64 rng(900 + step);
  std::uniform_real_distribution<double> dist(0, 1);
  std::vector<double> values(static_cast<std::size_t>(kBatch) * 3 * kPatch * kPatch);
  for (auto& v : values) v = dist(rng);
  return values;
}

// k steps of Adam with clipping on cuda:0; through `communicator` when given;
// with `cuda_graph`, each step recorded into a StepGraph (the bucket
// all-reduces with it) and replayed, paced by Communicator::mark_step.
std::map<std::string, std::vector<double>> train(int steps, Communicator* communicator, std::size_t bucket_bytes,
                                                 bool cuda_graph = false) {
  Net net(conv_spec(), registry, {{"image", {kBatch, 3, kPatch, kPatch}}}, DType::f32, Device::cuda(0), 5);
  Context ctx(Device::cuda(0), 5);
  Adam adam(0.01);
  GradientClipper clipper(0.05);
  const auto parameters = net.trainable_parameters();
  std::unique_ptr<GradientBuckets> buckets;
  if (communicator) {
    broadcast_parameters(ctx, *communicator, net.parameters());
    buckets = std::make_unique<GradientBuckets>(net, *communicator, bucket_bytes);
    EXPECT_GT(buckets->buckets().size(), bucket_bytes < 4096 ? 1u : 0u);
  }
  StepGraph graph(cuda_graph);
  for (int step = 0; step < steps; ++step) {
    if (communicator && !cuda_graph) communicator->synchronize();
    net.input("image").copy_from(Tensor::from_values(batch_values(step), {kBatch, 3, kPatch, kPatch}));
    adam.begin_step(ctx, parameters);
    graph.run(ctx, net.layout_version(), [&] {
      net.zero_grad();
      net.forward(ctx);
      net.backward(ctx, {{"loss", 1.0}});
      if (buckets) buckets->finish(ctx);
      clipper.clip(ctx, parameters);
      adam.apply(ctx, parameters);
    });
    if (communicator && cuda_graph) communicator->mark_step(ctx);
  }
  EXPECT_EQ(graph.recordings(), cuda_graph && steps > 1 ? 1 : 0);
  if (communicator) check_replicas_agree(ctx, *communicator, net.parameters(), steps);
  ctx.synchronize();
  std::map<std::string, std::vector<double>> values;
  for (const auto& p : parameters) values[p.name] = p.parameter->value.to_values();
  return values;
}

// Every parameter of `got` within 1e-6 absolute of `expected` (a failure
// names the parameter, the element and `label`); returns the largest
// difference.
double expect_same_parameters(const std::map<std::string, std::vector<double>>& expected,
                              const std::map<std::string, std::vector<double>>& got, const std::string& label) {
  double largest = 0;
  for (const auto& [name, values] : expected) {
    const auto& other = got.at(name);
    EXPECT_EQ(other.size(), values.size()) << name << ", " << label;
    for (std::size_t i = 0; i < std::min(other.size(), values.size()); ++i) {
      largest = std::max(largest, std::abs(other[i] - values[i]));
      EXPECT_NEAR(other[i], values[i], 1e-6) << name << "[" << i << "], " << label;
    }
  }
  return largest;
}

TEST(NcclCommunicator, CollectivesAtWorldSizeOne) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-collectives");
  auto comm = make_nccl_communicator(world_of_one(folder));
  EXPECT_EQ(comm->kind(), "nccl");
  EXPECT_FALSE(std::filesystem::exists(folder / "rendezvous")) << "rank 0 removes the used id";
  Context ctx(Device::cuda(0));
  Tensor sum = Tensor::from_values({1.5, -2, 3}, {3}, DType::f32, Device::cuda(0));
  Tensor mean = sum.clone();
  comm->all_reduce(ctx, sum, Reduction::sum);
  comm->all_reduce(ctx, mean, Reduction::average);
  comm->broadcast(ctx, mean, 0);
  comm->synchronize();
  EXPECT_EQ(sum.to_values(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(mean.to_values(), (std::vector<double>{1.5, -2, 3}));
  comm->barrier();
  Tensor on_cpu({3});
  try {
    comm->all_reduce(ctx, on_cpu, Reduction::sum);
    FAIL() << "a CPU buffer was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the communicator works on cuda:0"), std::string::npos) << e.what();
  }
}

// The data-parallel step through NCCL at world size 1 (several buckets, all
// reduced during backward on NCCL's stream, then unpacked) must give the
// plain step's parameters: averaging over one rank changes nothing, so the
// tolerance is 1e-6 absolute and the difference expected is 0.
TEST(NcclCommunicator, WorldSizeOneTrainsThePlainPathsParameters) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-train");
  const int steps = 6;
  const auto plain = train(steps, nullptr, 0);
  for (std::size_t bucket_bytes : {std::size_t{1024}, GradientBuckets::kDefaultBucketBytes}) {
    auto comm = make_nccl_communicator(world_of_one(folder));
    const auto through_nccl = train(steps, comm.get(), bucket_bytes);
    const double largest =
        expect_same_parameters(plain, through_nccl, "buckets of " + std::to_string(bucket_bytes) + " B");
    std::printf("buckets of %zu B: largest parameter difference after %d steps: %g\n", bucket_bytes, steps, largest);
  }
}

// The same through NCCL with every step after the first replayed from a
// CUDA graph that holds the bucket all-reduces (recorded on NCCL's stream,
// joined back before clipping). Same tolerance, difference expected 0.
TEST(NcclCommunicator, AStepGraphWithTheAllReducesTrainsThePlainPathsParameters) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-graph");
  const int steps = 6;
  const auto plain = train(steps, nullptr, 0);
  auto comm = make_nccl_communicator(world_of_one(folder));
  const auto replayed = train(steps, comm.get(), 1024, /*cuda_graph=*/true);
  comm->synchronize();  // waits for the last mark: the replayed steps are done
  const double largest = expect_same_parameters(plain, replayed, "replayed steps");
  std::printf("replayed steps: largest parameter difference after %d steps: %g\n", steps, largest);
  // An eager collective after the replayed steps still works on the same communicator.
  Context ctx(Device::cuda(0));
  Tensor values = Tensor::from_values({2, 4}, {2}, DType::f32, Device::cuda(0));
  comm->all_reduce(ctx, values, Reduction::average);
  comm->synchronize();
  EXPECT_EQ(values.to_values(), (std::vector<double>{2, 4}));
}

// Rank 1 of 2 never starts: rank 0 must give up joining within its timeout
// (aborting NCCL) with an error that says so, instead of waiting forever.
TEST(NcclCommunicator, AMissingRankEndsInAnErrorWithinTheTimeout) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-missing");
  NcclSetup setup = world_of_one(folder, 3);
  setup.world_size = 2;
  const auto start = std::chrono::steady_clock::now();
  try {
    make_nccl_communicator(setup);
    FAIL() << "joined a world of 2 alone";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("waited more than 3"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
}

TEST(NcclCommunicator, ARankWithoutAnIdToReadTimesOut) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  ScratchFolder folder("nccl-no-id");
  NcclSetup setup = world_of_one(folder, 1);
  setup.world_size = 2;
  setup.rank = 1;
  try {
    make_nccl_communicator(setup);
    FAIL() << "rank 1 went on without rank 0's id";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 did not publish its id"), std::string::npos) << e.what();
  }
}

// The NCCL id through the TCP rendezvous, as under torchrun: a world of one
// (rank 0 listens, nobody else comes) joins and reduces.
TEST(NcclCommunicator, JoinsThroughTheTcpRendezvous) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  NcclSetup setup;
  setup.timeout_seconds = 60;
  TcpRendezvousSetup meeting;
  meeting.host = "127.0.0.1";
  meeting.timeout_seconds = 60;
  setup.share_unique_id = [meeting](void* id, std::size_t bytes) { share_through_tcp_rendezvous(meeting, id, bytes); };
  auto comm = make_nccl_communicator(setup);
  Context ctx(Device::cuda(0));
  Tensor values = Tensor::from_values({1, -2}, {2}, DType::f32, Device::cuda(0));
  comm->all_reduce(ctx, values, Reduction::sum);
  comm->synchronize();
  EXPECT_EQ(values.to_values(), (std::vector<double>{1, -2}));
}

// The TCP rendezvous on the CPU.

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message `body` throws, "" when it throws nothing.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<char> random_bytes(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> bytes(count);
  for (char& byte : bytes) byte = static_cast<char>(rng() & 0xFF);
  return bytes;
}

TcpRendezvousSetup rank_setup(int rank, int world_size, int port, double timeout = 20) {
  TcpRendezvousSetup setup;
  setup.host = "127.0.0.1";
  setup.port = port;
  setup.rank = rank;
  setup.world_size = world_size;
  setup.timeout_seconds = timeout;
  return setup;
}

// A socket of this test's own on 127.0.0.1: listening on a port the system
// chooses, or connected to `port`. Closed at the end of its scope.
class RawSocket {
 public:
  static RawSocket listening() {
    RawSocket raw;
    sockaddr_in address = loopback(0);
    EXPECT_EQ(::bind(raw.fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(raw.fd_, 8), 0);
    socklen_t length = sizeof address;
    getsockname(raw.fd_, reinterpret_cast<sockaddr*>(&address), &length);
    raw.port_ = ntohs(address.sin_port);
    return raw;
  }
  static RawSocket connected(int port) {
    RawSocket raw;
    sockaddr_in address = loopback(port);
    EXPECT_EQ(::connect(raw.fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
    return raw;
  }
  RawSocket(RawSocket&& other) noexcept : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  int port() const { return port_; }
  void send(const std::vector<char>& bytes) const {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  // Everything received until the peer closes, or until `seconds` pass
  // (then `closed` is false).
  std::string receive_until_closed(double seconds, bool* closed) const {
    std::string received;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    *closed = false;
    while (Clock::now() < deadline) {
      pollfd entry{fd_, POLLIN, 0};
      if (::poll(&entry, 1, 50) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        *closed = true;
        break;
      }
      received.append(chunk, static_cast<std::size_t>(n));
    }
    return received;
  }

 private:
  RawSocket() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {}
  static sockaddr_in loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    return address;
  }
  int fd_ = -1;
  int port_ = 0;
};

// A port that was free a moment ago: the system's choice for a listener
// that is closed again.
int recently_free_port() { return RawSocket::listening().port(); }

// Ranks 1 .. world_size-1 on threads, receiving into `received`; their
// errors ("" for none) in `errors`.
std::vector<std::thread> start_receivers(int world_size, int port, std::vector<std::vector<char>>& received,
                                         std::vector<std::string>& errors, double timeout = 20) {
  received.assign(static_cast<std::size_t>(world_size), std::vector<char>(128, 0));
  errors.assign(static_cast<std::size_t>(world_size), "");
  std::vector<std::thread> threads;
  for (int rank = 1; rank < world_size; ++rank)
    threads.emplace_back([&received, &errors, rank, world_size, port, timeout] {
      TcpRendezvousSetup setup = rank_setup(rank, world_size, port, timeout);
      if (rank == 2) setup.host = "localhost";  // a name, resolved through getaddrinfo
      errors[rank] = error_of([&] { receive_from_tcp_rendezvous(setup, received[rank].data(), 128); });
    });
  return threads;
}

void join(std::vector<std::thread>& threads) {
  for (std::thread& thread : threads) thread.join();
}

TEST(TcpRendezvous, EveryRankReceivesRankZerosBytes) {
  const int world_size = 5;
  TcpRendezvousListener listener(rank_setup(0, world_size, 0));
  ASSERT_GT(listener.port(), 0);
  const std::vector<char> id = random_bytes(128, 7);
  std::vector<std::vector<char>> received;
  std::vector<std::string> errors;
  auto threads = start_receivers(world_size, listener.port(), received, errors);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  join(threads);
  EXPECT_EQ(rank0_error, "");
  for (int rank = 1; rank < world_size; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(received[rank], id) << "rank " << rank;
  }
}

// Ranks that start first find nobody at the port, and retry until rank 0
// listens there.
TEST(TcpRendezvous, RanksThatStartBeforeRankZeroWaitForIt) {
  const int world_size = 3, port = recently_free_port();
  std::vector<std::vector<char>> received;
  std::vector<std::string> errors;
  auto threads = start_receivers(world_size, port, received, errors);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<char> id = random_bytes(128, 8);
  const std::string rank0_error =
      error_of([&] { share_through_tcp_rendezvous(rank_setup(0, world_size, port), id.data(), id.size()); });
  join(threads);
  EXPECT_EQ(rank0_error, "");
  for (int rank = 1; rank < world_size; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(received[rank], id) << "rank " << rank;
  }
}

// Rank 2 of 3 never comes: rank 0 gives up after its timeout naming it, and
// tells rank 1, which came, why.
TEST(TcpRendezvous, ARankThatNeverComesIsNamedWithinTheTimeout) {
  TcpRendezvousListener listener(rank_setup(0, 3, 0, 1));
  std::vector<char> into(128);
  std::string rank1_error;
  std::thread rank1([&] {
    rank1_error =
        error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 3, listener.port(), 1), into.data(), 128); });
  });
  const auto start = Clock::now();
  const std::vector<char> id = random_bytes(128, 9);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  const double waited = seconds_since(start);
  rank1.join();
  EXPECT_TRUE(contains(rank0_error, "rank 0 of 3, the rendezvous at 127.0.0.1:" + std::to_string(listener.port())))
      << rank0_error;
  EXPECT_TRUE(contains(rank0_error, "rank 2 did not reach the rendezvous within 1 s (2 of 3 ranks came"))
      << rank0_error;
  EXPECT_TRUE(contains(rank1_error, "rank 1 of 3, at the rendezvous at 127.0.0.1:")) << rank1_error;
  EXPECT_TRUE(contains(rank1_error, "rank 0 refused this rank: rank 2 did not reach the rendezvous")) << rank1_error;
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 5.0);
}

// Nobody listens: the rank gives up after its timeout, naming the address.
TEST(TcpRendezvous, ARankThatCannotReachRankZeroSaysWhereWithinTheTimeout) {
  const int port = recently_free_port();
  std::vector<char> into(128);
  const auto start = Clock::now();
  const std::string error =
      error_of([&] { receive_from_tcp_rendezvous(rank_setup(3, 4, port, 0.5), into.data(), 128); });
  const double waited = seconds_since(start);
  EXPECT_TRUE(contains(error, "rank 3 of 4 could not reach the rendezvous at 127.0.0.1:" + std::to_string(port) +
                                  " within 0.5 s: Connection refused"))
      << error;
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 4.0);
  const std::string unknown = error_of([&] {
    TcpRendezvousSetup setup = rank_setup(1, 2, port, 0.5);
    setup.host = "no-such-host.invalid";
    receive_from_tcp_rendezvous(setup, into.data(), 128);
  });
  // A name service that answers says the name does not exist; on a node without one, resolving is
  // retried (it may be a passing outage) until the timeout, and the error says so.
  EXPECT_TRUE(contains(unknown, "rank 1 of 2 could not resolve the rendezvous host 'no-such-host.invalid'") ||
              contains(unknown, "rank 1 of 2 could not reach the rendezvous at no-such-host.invalid:" +
                                    std::to_string(port) + " within 0.5 s: resolving 'no-such-host.invalid'"))
      << unknown;
}

// A rank of a world of another size (another job on the port, or a
// mislaunched rank) ends the rendezvous on both sides at once, named.
TEST(TcpRendezvous, AMismatchedWorldSizeIsRefused) {
  TcpRendezvousListener listener(rank_setup(0, 3, 0, 20));
  std::vector<char> into(128);
  std::string stranger_error;
  std::thread stranger([&] {
    stranger_error =
        error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 4, listener.port(), 20), into.data(), 128); });
  });
  const auto start = Clock::now();
  const std::vector<char> id = random_bytes(128, 10);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  stranger.join();
  EXPECT_LT(seconds_since(start), 10.0) << "refused at once, not after the timeout";
  EXPECT_TRUE(contains(rank0_error, "rank 1 (from 127.0.0.1:")) << rank0_error;
  EXPECT_TRUE(contains(rank0_error, "is in a world of 4 ranks, rank 0 in a world of 3")) << rank0_error;
  EXPECT_TRUE(contains(stranger_error, "rank 0 refused this rank: rank 1 (from 127.0.0.1:")) << stranger_error;
  EXPECT_TRUE(contains(stranger_error, "is in a world of 4 ranks, rank 0 in a world of 3")) << stranger_error;
}

TEST(TcpRendezvous, ARankThatArrivesTwiceIsRefused) {
  TcpRendezvousListener listener(rank_setup(0, 3, 0, 20));
  std::vector<std::vector<char>> into(2, std::vector<char>(128));
  std::vector<std::string> errors(2);
  std::vector<std::thread> twins;
  for (int twin = 0; twin < 2; ++twin)
    twins.emplace_back([&, twin] {
      errors[twin] =
          error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 3, listener.port(), 20), into[twin].data(), 128); });
    });
  const std::vector<char> id = random_bytes(128, 11);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  join(twins);
  EXPECT_TRUE(contains(rank0_error, "rank 1 arrived twice, from 127.0.0.1:")) << rank0_error;
  EXPECT_TRUE(contains(rank0_error, "were two processes given RANK=1?")) << rank0_error;
  for (const std::string& error : errors) EXPECT_TRUE(contains(error, "rank 1 arrived twice")) << error;
}

// Random bytes at the port (a port scanner, another program) are refused
// and ignored, as is a connection that says nothing: the ranks still meet.
TEST(TcpRendezvous, AStrayConnectionIsRefusedAndTheRanksStillMeet) {
  TcpRendezvousListener listener(rank_setup(0, 2, 0, 20));
  RawSocket silent = RawSocket::connected(listener.port());
  RawSocket stray = RawSocket::connected(listener.port());
  std::vector<char> noise = random_bytes(64, 12);
  noise[0] = 'G';  // never the magic's first byte
  stray.send(noise);
  std::vector<char> into(128);
  std::string rank1_error;
  std::thread rank1([&] {
    rank1_error = error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 2, listener.port()), into.data(), 128); });
  });
  const std::vector<char> id = random_bytes(128, 13);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  rank1.join();
  EXPECT_EQ(rank0_error, "");
  EXPECT_EQ(rank1_error, "");
  EXPECT_EQ(into, id);
  bool closed = false;
  const std::string answer = stray.receive_until_closed(5, &closed);
  EXPECT_TRUE(closed) << "the stray connection is closed";
  EXPECT_EQ(answer.rfind("PLEXUSRV", 0), 0u) << answer;
  EXPECT_TRUE(contains(answer, "is not one of its messages")) << answer;
}

// The hello of `rank` of `world_size` expecting 128 bytes, as the protocol
// writes it (tcp_rendezvous.cpp): the magic, then version 1, kind 1 (hello),
// rank, world size, length, big-endian.
std::vector<char> hello_of(std::uint32_t rank, std::uint32_t world_size) {
  std::vector<char> bytes{'P', 'L', 'E', 'X', 'U', 'S', 'R', 'V'};
  for (const std::uint32_t field : {1u, 1u, rank, world_size, 128u})
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((field >> shift) & 0xFF));
  return bytes;
}

// Rank 1 says hello, takes the id and vanishes without confirming it: rank
// 0 names it, and rank 2, which has the id, is not told that every rank has
// it (the barrier) but why not.
TEST(TcpRendezvous, ARankThatLeavesWithoutConfirmingIsNamedOnEveryRank) {
  TcpRendezvousListener listener(rank_setup(0, 3, 0, 20));
  std::thread rank1([&] {
    RawSocket raw = RawSocket::connected(listener.port());
    raw.send(hello_of(1, 3));
    char header[28];
    ::recv(raw.fd(), header, sizeof header, MSG_WAITALL);  // the start of the id, then gone
  });
  std::vector<char> into(128);
  std::string rank2_error;
  std::thread rank2([&] {
    rank2_error = error_of([&] { receive_from_tcp_rendezvous(rank_setup(2, 3, listener.port()), into.data(), 128); });
  });
  const std::vector<char> id = random_bytes(128, 15);
  const std::string rank0_error = error_of([&] { listener.send_to_every_rank(id.data(), id.size()); });
  rank1.join();
  rank2.join();
  EXPECT_TRUE(contains(rank0_error, "waiting for rank 1 (at 127.0.0.1:")) << rank0_error;
  EXPECT_TRUE(contains(rank0_error, "to confirm the id: failed: the rank closed its connection")) << rank0_error;
  EXPECT_TRUE(contains(rank2_error, "rank 0 refused this rank: waiting for rank 1 (at 127.0.0.1:")) << rank2_error;
}

// The other way round: rank 0's port answers with something else.
TEST(TcpRendezvous, AnAnswerThatIsNotRankZerosIsRefused) {
  RawSocket impostor = RawSocket::listening();
  std::thread answer([&] {
    const int fd = ::accept(impostor.fd(), nullptr, nullptr);
    if (fd < 0) return;
    const std::vector<char> noise = random_bytes(64, 14);
    ::send(fd, noise.data(), noise.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(fd);
  });
  std::vector<char> into(128);
  const std::string error =
      error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 2, impostor.port(), 5), into.data(), 128); });
  answer.join();
  EXPECT_TRUE(contains(error, "rank 1 of 2, at the rendezvous at 127.0.0.1:" + std::to_string(impostor.port()) +
                                  ": the answer is not a Plexus rendezvous message"))
      << error;
}

TEST(TcpRendezvous, APortInUseIsAClearError) {
  RawSocket holder = RawSocket::listening();
  const std::string error = error_of([&] { TcpRendezvousListener listener(rank_setup(0, 2, holder.port())); });
  EXPECT_TRUE(contains(error, "rank 0 of 2 could not listen for the rendezvous on port " +
                                  std::to_string(holder.port()) + ": Address already in use"))
      << error;
  EXPECT_TRUE(contains(error, "choose another MASTER_PORT")) << error;
}

TEST(TcpRendezvous, BadSetupsAreNamed) {
  std::vector<char> into(128);
  EXPECT_TRUE(contains(error_of([&] { receive_from_tcp_rendezvous(rank_setup(2, 2, 29500), into.data(), 128); }),
                       "rank 2 of world size 2 is not a valid rank"));
  EXPECT_TRUE(contains(error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 2, 0), into.data(), 128); }),
                       "port 0 is not in [1, 65535]"));
  EXPECT_TRUE(contains(error_of([&] { receive_from_tcp_rendezvous(rank_setup(1, 2, 29500, 0), into.data(), 128); }),
                       "the timeout must be > 0 seconds"));
  EXPECT_TRUE(contains(error_of([&] { receive_from_tcp_rendezvous(rank_setup(0, 2, 29500), into.data(), 128); }),
                       "rank 0 sends the bytes"));
  EXPECT_TRUE(
      contains(error_of([&] { TcpRendezvousListener listener(rank_setup(1, 2, 29500)); }), "rank 1 cannot listen"));
}

}  // namespace
}  // namespace plexus::distributed

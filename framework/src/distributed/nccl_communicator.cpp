// The NCCL communicator; a build without NCCL (PLEXUS_WITH_NCCL 0) gets the
// stand-in at the end of this file, which says what is missing.
#include "plexus/distributed/nccl_communicator.h"

#if PLEXUS_WITH_NCCL
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "plexus/atomic_file.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/error.h"

namespace plexus::distributed {

bool built_with_nccl() { return true; }

std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr long kLongestPauseMicroseconds = 20;

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const NcclSetup& setup) : setup_(setup) {
    if (setup.world_size < 1 || setup.rank < 0 || setup.rank >= setup.world_size)
      throw ConfigError("NCCL: rank " + std::to_string(setup.rank) + " of world size " +
                        std::to_string(setup.world_size) + " is not a valid rank");
    if (!(setup.timeout_seconds > 0)) throw ConfigError("NCCL: the timeout must be > 0 seconds");
    cuda::check_cuda(cudaSetDevice(setup.device), "cudaSetDevice", __FILE__, __LINE__);
    const ncclUniqueId id = rendezvous();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every NCCL call returns at once; waits poll with a timeout below
    check(ncclCommInitRankConfig(&comm_, setup.world_size, id, setup.rank, &config), "ncclCommInitRankConfig", __FILE__,
          __LINE__);
    settle("joining the communicator (ncclCommInitRankConfig)");
    cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", __FILE__,
                     __LINE__);
    cuda::check_cuda(cudaEventCreateWithFlags(&enqueued_, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
                     __LINE__);
    cuda::check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
                     __LINE__);
    for (cudaEvent_t& mark : step_marks_)
      cuda::check_cuda(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
                       __LINE__);
    barrier_buffer_ = Tensor({1}, DType::f32, Device::cuda(setup.device));
    // The buffer was zeroed on the legacy stream, which the communicator's
    // non-blocking stream does not wait for.
    cuda::check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", __FILE__, __LINE__);
    barrier();
    if (setup.rank == 0 && !setup.share_unique_id) {  // every rank has joined: the id is used up
      std::error_code ignored;
      std::filesystem::remove(setup.rendezvous_file, ignored);
    }
  }

  // A normal end flushes and finalizes; while an exception unwinds (this
  // rank failed, its peers may be gone) the communicator is aborted at once
  // rather than waiting on them.
  ~NcclCommunicator() override {
    if (comm_ && !failed_ && std::uncaught_exceptions() == 0) {
      try {
        synchronize();
        check(ncclCommFinalize(comm_), "ncclCommFinalize", __FILE__, __LINE__);
        settle("finalizing the communicator (ncclCommFinalize)");
        ncclCommDestroy(comm_);
        comm_ = nullptr;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: closing NCCL: %s\n", setup_.rank, e.what());
      }
    }
    if (comm_) ncclCommAbort(comm_);
    for (cudaEvent_t mark : step_marks_)
      if (mark) cudaEventDestroy(mark);
    if (done_) cudaEventDestroy(done_);
    if (enqueued_) cudaEventDestroy(enqueued_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return setup_.rank; }
  int world_size() const override { return setup_.world_size; }
  std::string kind() const override { return "nccl"; }

  void all_reduce(Context& ctx, Tensor& buffer, Reduction reduction) override {
    check_collective_buffer(buffer, Device::cuda(setup_.device), "all_reduce");
    after_context_work(ctx);
    check(ncclAllReduce(buffer.raw_data(), buffer.raw_data(), static_cast<std::size_t>(buffer.numel()), ncclFloat32,
                        reduction == Reduction::average ? ncclAvg : ncclSum, comm_, stream_),
          "ncclAllReduce", __FILE__, __LINE__);
    settle("enqueuing ncclAllReduce");
    mark_done();
  }

  void broadcast(Context& ctx, Tensor& buffer, int root) override {
    check_collective_buffer(buffer, Device::cuda(setup_.device), "broadcast");
    if (root < 0 || root >= setup_.world_size)
      throw ConfigError("broadcast: root rank " + std::to_string(root) + " is not in [0, " +
                        std::to_string(setup_.world_size) + ")");
    after_context_work(ctx);
    check(ncclBroadcast(buffer.raw_data(), buffer.raw_data(), static_cast<std::size_t>(buffer.numel()), ncclFloat32,
                        root, comm_, stream_),
          "ncclBroadcast", __FILE__, __LINE__);
    settle("enqueuing ncclBroadcast");
    mark_done();
  }

  void join(Context& ctx) override {
    cuda::check_cuda(cudaStreamWaitEvent(cuda::stream(ctx), done_, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
  }

  void synchronize() override {
    wait_until("the collectives to finish", [&] { return event_passed(done_); });
  }

  void mark_step(Context& ctx) override {
    check_context(ctx);
    // The mark to reuse is the one of two steps ago: wait for it first.
    cudaEvent_t mark = step_marks_[steps_marked_ % step_marks_.size()];
    if (steps_marked_ >= static_cast<std::int64_t>(step_marks_.size()))
      wait_until("the training step before last to finish", [&] { return event_passed(mark); });
    const cudaStream_t stream = cuda::stream(ctx);
    cuda::check_cuda(cudaEventRecord(mark, stream), "cudaEventRecord", __FILE__, __LINE__);
    // done_ may last have been recorded inside a graph capture, where it
    // marks nothing that can be waited for: from now on it marks this step.
    cuda::check_cuda(cudaEventRecord(done_, stream), "cudaEventRecord", __FILE__, __LINE__);
    ++steps_marked_;
  }

  void barrier() override {
    check(
        ncclAllReduce(barrier_buffer_.raw_data(), barrier_buffer_.raw_data(), 1, ncclFloat32, ncclSum, comm_, stream_),
        "ncclAllReduce (barrier)", __FILE__, __LINE__);
    settle("enqueuing the barrier");
    mark_done();
    synchronize();
  }

 private:
  std::string who() const { return "rank " + std::to_string(setup_.rank) + " of " + std::to_string(setup_.world_size); }

  void check(ncclResult_t status, const char* call, const char* file, int line) {
    if (status == ncclSuccess || status == ncclInProgress) return;
    const char* detail = comm_ ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
    fail(std::string(call) + " failed: " + ncclGetErrorString(status) +
         (detail && *detail ? std::string(" (") + detail + ")" : std::string()) + " at " + cuda::where(file, line));
  }

  // Aborts the communicator, so no later call waits on it, and throws.
  [[noreturn]] void fail(const std::string& message) {
    failed_ = true;
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    throw DeviceError("NCCL, " + who() + ": " + message);
  }

  // Polls `ready` and the communicator's asynchronous error until `ready`
  // holds; an NCCL error or the timeout aborts.
  void wait_until(const std::string& what, const std::function<bool()>& ready) {
    if (!comm_) fail("the communicator was aborted earlier; cannot wait for " + what);
    const auto deadline = Clock::now() + std::chrono::duration<double>(setup_.timeout_seconds);
    // Short pauses: training waits here once a step, and every microsecond
    // slept past the end of the reductions is the GPU idling.
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", __FILE__, __LINE__);
      if (state != ncclSuccess && state != ncclInProgress)
        fail(std::string("asynchronous error while waiting for ") + what + ": " + ncclGetErrorString(state) + " (" +
             ncclGetLastError(comm_) + ")");
      if (ready()) return;
      if (Clock::now() > deadline)
        fail("waited more than " + std::to_string(setup_.timeout_seconds) + " s for " + what +
             "; another rank has probably died or stopped");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(kLongestPauseMicroseconds));
    }
  }

  // A non-blocking communicator's calls may return ncclInProgress: wait
  // until the call's state is settled.
  void settle(const std::string& what) {
    wait_until(what, [&] {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", __FILE__, __LINE__);
      return state != ncclInProgress;
    });
  }

  static bool event_passed(cudaEvent_t event) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    cuda::check_cuda(status, "cudaEventQuery", __FILE__, __LINE__);
    return true;
  }

  void check_context(const Context& ctx) const {
    if (ctx.device() != Device::cuda(setup_.device))
      throw ConfigError("NCCL, " + who() + ": a context of " + ctx.device().str() +
                        ", but the communicator is on cuda:" + std::to_string(setup_.device));
  }

  void after_context_work(Context& ctx) {
    check_context(ctx);
    cuda::check_cuda(cudaEventRecord(enqueued_, cuda::stream(ctx)), "cudaEventRecord", __FILE__, __LINE__);
    cuda::check_cuda(cudaStreamWaitEvent(stream_, enqueued_, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
  }

  void mark_done() { cuda::check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord", __FILE__, __LINE__); }

  // Rank 0 publishes a fresh id; the others wait (up to the timeout) for it.
  ncclUniqueId rendezvous() {
    ncclUniqueId id{};
    if (setup_.share_unique_id) {
      if (setup_.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", __FILE__, __LINE__);
      setup_.share_unique_id(&id, sizeof id);
      return id;
    }
    const std::string& path = setup_.rendezvous_file;
    if (path.empty()) throw ConfigError("NCCL, " + who() + ": no rendezvous file given");
    if (setup_.rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId", __FILE__, __LINE__);
      write_file_atomically(path, std::string(reinterpret_cast<const char*>(&id), sizeof id), "NCCL rendezvous id");
      return id;
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(setup_.timeout_seconds);
    for (;;) {
      std::ifstream file(path, std::ios::binary);
      if (file && file.read(reinterpret_cast<char*>(&id), sizeof id) && file.gcount() == sizeof id) return id;
      if (Clock::now() > deadline)
        throw IoError("NCCL, " + who() + ": rank 0 did not publish its id in '" + path + "' within " +
                      std::to_string(setup_.timeout_seconds) + " s; did rank 0 start?");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  NcclSetup setup_;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t enqueued_ = nullptr;           // recorded on the caller's stream before each collective
  cudaEvent_t done_ = nullptr;               // recorded on stream_ after each collective (and by mark_step)
  std::array<cudaEvent_t, 2> step_marks_{};  // mark_step's, used in turn
  std::int64_t steps_marked_ = 0;
  Tensor barrier_buffer_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclSetup& setup) {
  return std::make_unique<NcclCommunicator>(setup);
}

}  // namespace plexus::distributed

#else  // no NCCL

#include "plexus/error.h"

namespace plexus::distributed {

bool built_with_nccl() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(const NcclSetup&) {
  throw ConfigError("this build of Plexus has no NCCL, which training on several GPUs needs: install NCCL (libnccl-dev "
                    "from NVIDIA's CUDA package "
                    "repository, or the nvidia-nccl Python wheel) and reconfigure, with -DNCCL_ROOT=<prefix> if CMake "
                    "does not find it");
}

}  // namespace plexus::distributed

#endif  // PLEXUS_WITH_NCCL

#include "plexus/distributed/mpi_communicator.h"

#include "plexus/error.h"

#if PLEXUS_WITH_MPI
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <thread>
#endif

namespace plexus::distributed {

#if PLEXUS_WITH_MPI

bool built_with_mpi() { return true; }

std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<std::size_t>(std::max(length, 0)));
  version = version.substr(0, version.find_first_of("\r\n"));
  return version.substr(0, version.find(','));
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr long kLongestPauseMicroseconds = 200;

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(std::max(length, 0)));
}

MPI_Datatype mpi_type_of(const Tensor& buffer, const char* collective) {
  if (!buffer.defined()) throw ConfigError(std::string(collective) + ": the buffer is an empty tensor");
  if (buffer.device() != Device::cpu())
    throw ConfigError(std::string(collective) + ": the buffer is " + buffer.describe() +
                      " but the MPI communicator works on the CPU");
  if (buffer.numel() > INT_MAX)
    throw ConfigError(std::string(collective) + ": the buffer is " + buffer.describe() + ", more than " +
                      std::to_string(INT_MAX) + " elements");
  if (buffer.dtype() == DType::f32) return MPI_FLOAT;
  if (buffer.dtype() == DType::f64) return MPI_DOUBLE;
  throw ConfigError(std::string(collective) + ": the buffer is " + buffer.describe() +
                    "; only f32 and f64 are supported");
}

class MpiWorld : public MpiCommunicator {
 public:
  explicit MpiWorld(const MpiSetup& setup) : setup_(setup), host_(host_name()) {
    if (!(setup.timeout_seconds > 0)) throw ConfigError("MPI: the timeout must be > 0 seconds");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) throw ConfigError("MPI: this process has joined MPI already; one communicator per process");
    int provided = 0;
    // Only the thread that trains calls MPI.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    initialized_ = true;
    // Errors come back as codes, to be thrown naming this rank, not as MPI's default abort.
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int rank = -1, size = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    if (rank != setup.rank || size != setup.world_size)
      throw ConfigError("MPI says this process is rank " + std::to_string(rank) + " of " + std::to_string(size) +
                        ", but the launcher's variables say rank " + std::to_string(setup.rank) + " of " +
                        std::to_string(setup.world_size) +
                        "; was it started by another launcher than the one MPI was built for?");
    barrier();
  }

  // A normal end finalises MPI, after every rank got here; while an
  // exception unwinds (this rank failed, its peers may be gone or waiting)
  // MPI is left to abort_mpi_job, which the caller runs after reporting.
  ~MpiWorld() override {
    if (!initialized_ || failed_ || std::uncaught_exceptions() > 0) return;
    MPI_Finalize();
  }

  int rank() const override { return setup_.rank; }
  int world_size() const override { return setup_.world_size; }
  std::string kind() const override { return "mpi"; }

  void all_reduce(Context&, Tensor& buffer, Reduction reduction) override {
    const MPI_Datatype type = mpi_type_of(buffer, "all_reduce");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer.raw_data(), static_cast<int>(buffer.numel()), type, MPI_SUM,
                         MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    wait(request, "all_reduce");
    if (reduction != Reduction::average) return;
    const std::int64_t n = buffer.numel();
    if (buffer.dtype() == DType::f32) {
      float* values = buffer.data<float>();
      for (std::int64_t i = 0; i < n; ++i) values[i] /= static_cast<float>(setup_.world_size);
    } else {
      double* values = buffer.data<double>();
      for (std::int64_t i = 0; i < n; ++i) values[i] /= static_cast<double>(setup_.world_size);
    }
  }

  void broadcast(Context&, Tensor& buffer, int root) override {
    const MPI_Datatype type = mpi_type_of(buffer, "broadcast");
    broadcast_raw(buffer.raw_data(), static_cast<int>(buffer.numel()), type, root, "broadcast");
  }

  void broadcast_bytes(void* data, std::size_t bytes, int root) override {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      throw ConfigError("MPI broadcast of " + std::to_string(bytes) + " bytes: more than " + std::to_string(INT_MAX));
    broadcast_raw(data, static_cast<int>(bytes), MPI_BYTE, root, "broadcast");
  }

  void join(Context&) override {}  // collectives complete before they return
  void synchronize() override {}
  void mark_step(Context&) override {}  // the CPU runs each step before the next is enqueued

  void barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait(request, "barrier");
  }

 private:
  std::string who() const {
    return "rank " + std::to_string(setup_.rank) + " of " + std::to_string(setup_.world_size) + " on " + host_;
  }

  void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    failed_ = true;
    throw Error("MPI, " + who() + ": " + call + " failed: " + mpi_error_text(code));
  }

  void broadcast_raw(void* data, int count, MPI_Datatype type, int root, const char* what) {
    if (root < 0 || root >= setup_.world_size)
      throw ConfigError(std::string(what) + ": root rank " + std::to_string(root) + " is not in [0, " +
                        std::to_string(setup_.world_size) + ")");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data, count, type, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    wait(request, what);
  }

  // Polls the request (which also lets MPI progress it) until it completes,
  // or throws after the timeout. The request cannot be cancelled: the
  // caller's error path ends the job (abort_mpi_job).
  void wait(MPI_Request& request, const char* what) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(setup_.timeout_seconds);
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (Clock::now() > deadline) {
        failed_ = true;
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", setup_.timeout_seconds);
        throw Error("MPI, " + who() + ": waited more than " + seconds + " s (--rank-timeout) for " + what +
                    "; another rank has probably died or hangs");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(kLongestPauseMicroseconds));
    }
  }

  const MpiSetup setup_;
  const std::string host_;
  bool initialized_ = false;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<MpiCommunicator> make_mpi_communicator(const MpiSetup& setup) {
  return std::make_unique<MpiWorld>(setup);
}

void abort_mpi_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#else  // a build without MPI

bool built_with_mpi() { return false; }
std::string mpi_version() { return ""; }

std::unique_ptr<MpiCommunicator> make_mpi_communicator(const MpiSetup&) {
  throw ConfigError("this build of Plexus has no MPI, which several ranks on the CPU and the MPI bootstrap of NCCL "
                    "need: install MPI (Debian: libopenmpi-dev openmpi-bin) and reconfigure");
}

void abort_mpi_job(int) {}

#endif

}  // namespace plexus::distributed

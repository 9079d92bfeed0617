#include "plexus/train/data_parallel.h"

#include <spdlog/spdlog.h>

#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/nccl_communicator.h"
#include "plexus/error.h"

namespace plexus::train {

static_assert(gradient_bucket_bytes(kDefaultGradientBucketMb) == distributed::GradientBuckets::kDefaultBucketBytes,
              "--gradient-bucket-mb's default is the framework's gradient bucket");

namespace {

// Launchers whose ranks MPI_Init can join: MPI's own, and srun's PMI.
bool mpi_launched(const WorkerEnvironment& environment) {
  return environment.started_by_mpi() || environment.launcher == Launcher::slurm;
}

std::unique_ptr<distributed::MpiCommunicator> join_mpi(const WorkerEnvironment& environment, double timeout_seconds) {
  distributed::MpiSetup setup;
  setup.rank = environment.rank;
  setup.world_size = environment.world_size;
  setup.timeout_seconds = timeout_seconds;
  return distributed::make_mpi_communicator(setup);
}

// torchrun's MASTER_ADDR and MASTER_PORT, where the ranks meet without MPI
// or a shared file; a ConfigError when only one of them is set.
bool meets_at_master_address(const WorkerEnvironment& environment) {
  if (environment.launcher != Launcher::torchrun) return false;
  const bool address = !environment.master_address.empty(), port = environment.master_port != 0;
  if (address != port)
    throw ConfigError(environment.describe() + ": " + (address ? "MASTER_PORT" : "MASTER_ADDR") + " is not set, but " +
                      (address ? "MASTER_ADDR" : "MASTER_PORT") + " is: the ranks meet at MASTER_ADDR:MASTER_PORT");
  return address;
}

}  // namespace

std::string why_cpu_ranks_cannot_meet(const WorkerEnvironment& environment) {
  if (environment.world_size == 1) return "";
  if (!distributed::built_with_mpi())
    return "several ranks on the CPU meet through MPI, and this build has none: install MPI (Debian: libopenmpi-dev "
           "openmpi-bin) and rebuild";
  if (!mpi_launched(environment))
    return std::string("several ranks on the CPU meet through MPI: start them with mpirun (or srun), not ") +
           launcher_name(environment.launcher);
  return "";
}

DataParallelRank::DataParallelRank(const WorkerEnvironment& environment, Device device, double timeout_seconds) {
  std::string id_route;  // how NCCL's id reaches the ranks, for the log: ", id through MPI"
  if (device.is_cpu() && environment.world_size == 1) {
    group_ = std::make_unique<distributed::InProcessGroup>(1);
    communicator_ = group_->communicator(0);
  } else if (device.is_cpu()) {
    if (const std::string missing = why_cpu_ranks_cannot_meet(environment); !missing.empty())
      throw ConfigError(environment.describe() + " on the CPU: " + missing);
    mpi_ = join_mpi(environment, timeout_seconds);
  } else {
    distributed::NcclSetup setup;
    setup.rank = environment.rank;
    setup.world_size = environment.world_size;
    setup.rendezvous_file = environment.rendezvous_file;
    setup.device = device.index;
    setup.timeout_seconds = timeout_seconds;
    const bool through_file = !setup.rendezvous_file.empty();
    if (!through_file && meets_at_master_address(environment)) {
      // NCCL's unique id, created by rank 0, reaches the others over TCP.
      distributed::TcpRendezvousSetup meeting;
      meeting.host = environment.master_address;
      meeting.port = environment.rendezvous_port();
      meeting.rank = environment.rank;
      meeting.world_size = environment.world_size;
      meeting.timeout_seconds = timeout_seconds;
      setup.share_unique_id = [meeting](void* id, std::size_t bytes) {
        distributed::share_through_tcp_rendezvous(meeting, id, bytes);
      };
      id_route = ", id through the TCP rendezvous at " + meeting.host + ":" + std::to_string(meeting.port);
    } else if (!through_file && environment.world_size == 1) {
      setup.share_unique_id = [](void*, std::size_t) {};  // rank 0 alone: its own id is everyone's
    } else if (!through_file) {
      if (!distributed::built_with_mpi() || !mpi_launched(environment))
        throw ConfigError(environment.describe() + ": its ranks meet through " + kRendezvousVariable +
                          " (a file path every rank sees, not existing yet), through MPI (ranks started by mpirun "
                          "or srun, in a build with MPI), or at MASTER_ADDR:MASTER_PORT (ranks started by torchrun, "
                          "or with its variables): set " +
                          kRendezvousVariable + (distributed::built_with_mpi() ? "" : " (this build has no MPI)"));
      // NCCL's unique id, created by rank 0, reaches the others through MPI.
      mpi_ = join_mpi(environment, timeout_seconds);
      setup.share_unique_id = [mpi = mpi_.get()](void* id, std::size_t bytes) { mpi->broadcast_bytes(id, bytes, 0); };
      id_route = ", id through MPI";
    }
    communicator_ = distributed::make_nccl_communicator(setup);
  }
  active_ = communicator_ ? communicator_.get() : mpi_.get();
  const std::string kind = active_->kind();
  std::string version;
  if (kind == "nccl") version = " " + distributed::nccl_version() + id_route;
  if (kind == "mpi") version = " " + distributed::mpi_version();
  spdlog::info("data-parallel rank {} of {} on {} ({}{}), local rank {}, started by {}", environment.rank,
               environment.world_size, device.str(), kind, version, environment.local_rank,
               launcher_name(environment.launcher));
}

}  // namespace plexus::train

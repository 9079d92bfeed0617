#pragma once
// How a worker of a data-parallel training run learns its place: from the
// environment variables of the launcher that started it. In order of
// precedence (the launcher that started this process directly comes first:
// mpirun inside a SLURM allocation leaves SLURM's variables describing the
// batch step, torchrun under srun leaves srun's describing the agents):
//   plexus   (supervise_workers, worker_launch.h, or a launcher of your own)
//            PLEXUS_RANK, PLEXUS_WORLD_SIZE, PLEXUS_RENDEZVOUS
//   torchrun RANK, LOCAL_RANK, WORLD_SIZE (MASTER_ADDR, MASTER_PORT)
//   Open MPI OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE
//   MPICH    PMI_RANK, PMI_SIZE, MPI_LOCALRANKID (Hydra; under srun's PMI, SLURM_LOCALID)
//   SLURM    SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (srun)
// A worker trains on cuda:LOCAL_RANK, its rank among the workers of its
// node (PLEXUS_RANK for the plexus launcher, which starts every worker on
// one machine). PLEXUS_RENDEZVOUS, a file path every worker sees, may also
// be given to the other launchers: it is how their workers meet without MPI.
#include <functional>
#include <optional>
#include <string>

namespace plexus::train {

inline constexpr const char* kRankVariable = "PLEXUS_RANK";
inline constexpr const char* kWorldSizeVariable = "PLEXUS_WORLD_SIZE";
inline constexpr const char* kRendezvousVariable = "PLEXUS_RENDEZVOUS";
// The most workers one launch of supervise_workers starts.
inline constexpr int kMaxWorkers = 64;
// The most ranks another launcher may start.
inline constexpr int kMaxLaunchedRanks = 1 << 20;

enum class Launcher { plexus, torchrun, open_mpi, mpich, slurm };
// "plexus", "torchrun", "Open MPI", "MPICH", "SLURM".
const char* launcher_name(Launcher launcher);

struct WorkerEnvironment {
  Launcher launcher = Launcher::plexus;
  int rank = 0;
  int local_rank = 0;  // among the workers of this node: the GPU is cuda:local_rank
  int world_size = 1;
  std::string rendezvous_file;  // PLEXUS_RENDEZVOUS, required by the plexus launcher only
  std::string master_address;   // torchrun's MASTER_ADDR and MASTER_PORT (0: not set)
  int master_port = 0;
  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent on MASTER_ADDR
  // listens on MASTER_PORT itself (its c10d store, for PyTorch's workers).
  bool agent_holds_master_port = false;
  // Where rank 0 listens for the TCP rendezvous (nccl_communicator.h):
  // MASTER_PORT, or the port after it when torchrun's agent holds MASTER_PORT.
  // 0 when MASTER_PORT is not set.
  int rendezvous_port() const {
    if (master_port == 0) return 0;
    return agent_holds_master_port ? master_port + 1 : master_port;
  }
  // Started by mpirun (Open MPI) or mpiexec (MPICH): MPI can join the ranks.
  bool started_by_mpi() const { return launcher == Launcher::open_mpi || launcher == Launcher::mpich; }
  // "rank 3 of 16 (local rank 3), started by Open MPI".
  std::string describe() const;
};

// Reads one environment variable: nullptr when it is not set.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// The worker variables of the first launcher above whose variables are set:
// nullopt when none is, and for a SLURM job of one task (a single process,
// as in a batch script that runs `plexus-ae train --gpus 8` itself); a ConfigError naming the variable when one of that
// launcher's variables is missing or invalid (not an integer, a rank not
// below the world size), or when two launchers of the same level (Open MPI
// and MPICH) disagree.
std::optional<WorkerEnvironment> worker_environment(const EnvironmentLookup& lookup);
// The same from this process's environment.
std::optional<WorkerEnvironment> worker_environment();

}  // namespace plexus::train

#include "plexus/train/worker_environment.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "plexus/error.h"

namespace plexus::train {

namespace {

// The three variables of a launcher: rank, local rank (nullptr: the rank)
// and world size, and the most ranks it may start.
struct LauncherVariables {
  Launcher launcher;
  const char* rank;
  const char* local_rank;
  const char* world_size;
  int most_ranks;
};

constexpr LauncherVariables kPlexus{Launcher::plexus, kRankVariable, nullptr, kWorldSizeVariable, kMaxWorkers};
constexpr LauncherVariables kTorchrun{Launcher::torchrun, "RANK", "LOCAL_RANK", "WORLD_SIZE", kMaxLaunchedRanks};
constexpr LauncherVariables kOpenMpi{Launcher::open_mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_SIZE", kMaxLaunchedRanks};
constexpr LauncherVariables kMpich{Launcher::mpich, "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", kMaxLaunchedRanks};
constexpr LauncherVariables kSlurm{Launcher::slurm, "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", kMaxLaunchedRanks};

class Reader {
 public:
  Reader(const EnvironmentLookup& lookup, const LauncherVariables& launcher) : lookup_(lookup), launcher_(launcher) {}

  bool set(const char* name) const {
    const char* value = lookup_(name);
    return value && *value;
  }

  // `name` as an integer in [low, high]; a ConfigError naming it otherwise.
  int integer(const char* name, int low, int high) const {
    const char* text = lookup_(name);
    if (!text || !*text)
      throw ConfigError(std::string(name) + " is not set, but " + present() +
                        " is: " + launcher_name(launcher_.launcher) + " sets " + all_names());
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < low || value > high)
      throw ConfigError(std::string(name) + "='" + text + "' is not an integer in [" + std::to_string(low) + ", " +
                        std::to_string(high) + "]" + range_reason(name));
    return static_cast<int>(value);
  }

 private:
  // The launcher's first variable that is set: what showed it started this process.
  std::string present() const {
    for (const char* name : {launcher_.rank, launcher_.world_size, launcher_.local_rank})
      if (name && set(name)) return name;
    return launcher_.rank;
  }
  std::string all_names() const {
    std::string names = std::string(launcher_.rank) + ", " + launcher_.world_size;
    if (launcher_.local_rank) names += ", " + std::string(launcher_.local_rank);
    return names;
  }
  // A rank's bound is the world size.
  std::string range_reason(const char* name) const {
    const std::string variable = name;
    if (variable != launcher_.rank && (!launcher_.local_rank || variable != launcher_.local_rank)) return "";
    return std::string(" (below ") + launcher_.world_size + ")";
  }
  const EnvironmentLookup& lookup_;
  const LauncherVariables& launcher_;
};

bool started_by(const EnvironmentLookup& lookup, const LauncherVariables& launcher) {
  Reader reader(lookup, launcher);
  return reader.set(launcher.rank) || reader.set(launcher.world_size);
}

WorkerEnvironment read_launcher(const EnvironmentLookup& lookup, const LauncherVariables& launcher) {
  const Reader reader(lookup, launcher);
  WorkerEnvironment environment;
  environment.launcher = launcher.launcher;
  environment.world_size = reader.integer(launcher.world_size, 1, launcher.most_ranks);
  environment.rank = reader.integer(launcher.rank, 0, environment.world_size - 1);
  environment.local_rank = environment.rank;
  if (launcher.launcher == Launcher::mpich && !reader.set(launcher.local_rank) && reader.set(kSlurm.rank)) {
    // srun's PMI sets PMI_RANK and PMI_SIZE but not Hydra's MPI_LOCALRANKID:
    // the node's ranks are then SLURM's, if SLURM describes the same task.
    const Reader slurm(lookup, kSlurm);
    if (slurm.integer(kSlurm.rank, 0, kMaxLaunchedRanks - 1) != environment.rank)
      throw ConfigError(std::string("MPI_LOCALRANKID is not set, and SLURM_PROCID='") + lookup(kSlurm.rank) +
                        "' is not PMI_RANK='" + lookup(launcher.rank) +
                        "': this process's rank among the ranks of its node is unknown");
    environment.local_rank = slurm.integer(kSlurm.local_rank, 0, environment.world_size - 1);
  } else if (launcher.local_rank) {
    environment.local_rank = reader.integer(launcher.local_rank, 0, environment.world_size - 1);
  }
  if (const char* rendezvous = lookup(kRendezvousVariable); rendezvous && *rendezvous)
    environment.rendezvous_file = rendezvous;
  else if (launcher.launcher == Launcher::plexus)
    throw ConfigError(std::string(kRendezvousVariable) + " is not set, but " + kRankVariable +
                      " is: it names the file through which the workers meet");
  if (launcher.launcher == Launcher::torchrun) {
    if (const char* address = lookup("MASTER_ADDR")) environment.master_address = address;
    if (const char* agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE"))
      environment.agent_holds_master_port = std::string(agent_store) == "True";  // as PyTorch reads it
    // The rendezvous then listens on MASTER_PORT + 1, which must be a port too.
    const int highest_port = environment.agent_holds_master_port ? 65534 : 65535;
    if (reader.set("MASTER_PORT")) environment.master_port = reader.integer("MASTER_PORT", 1, highest_port);
  }
  return environment;
}

// Open MPI and MPICH describe the same processes when both are set: they must agree.
void check_mpi_launchers_agree(const EnvironmentLookup& lookup, const WorkerEnvironment& chosen) {
  if (chosen.launcher != Launcher::open_mpi || !started_by(lookup, kMpich)) return;
  const Reader mpich(lookup, kMpich);
  const int size = mpich.integer(kMpich.world_size, 1, kMaxLaunchedRanks);
  const int rank = mpich.integer(kMpich.rank, 0, size - 1);
  if (rank != chosen.rank || size != chosen.world_size)
    throw ConfigError("Open MPI and MPICH both launched this process, and disagree: OMPI_COMM_WORLD_RANK=" +
                      std::to_string(chosen.rank) + " of OMPI_COMM_WORLD_SIZE=" + std::to_string(chosen.world_size) +
                      " but PMI_RANK=" + std::to_string(rank) + " of PMI_SIZE=" + std::to_string(size) +
                      "; start it with one MPI launcher");
}

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::plexus:
      return "plexus";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::open_mpi:
      return "Open MPI";
    case Launcher::mpich:
      return "MPICH";
    case Launcher::slurm:
      return "SLURM";
  }
  return "unknown";
}

std::string WorkerEnvironment::describe() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local rank " +
         std::to_string(local_rank) + "), started by " + launcher_name(launcher);
}

std::optional<WorkerEnvironment> worker_environment(const EnvironmentLookup& lookup) {
  // PLEXUS_RANK alone marks the plexus launcher, as it always has.
  if (lookup(kRankVariable)) return read_launcher(lookup, kPlexus);
  for (const LauncherVariables* launcher : {&kTorchrun, &kOpenMpi, &kMpich, &kSlurm}) {
    if (!started_by(lookup, *launcher)) continue;
    WorkerEnvironment environment = read_launcher(lookup, *launcher);
    check_mpi_launchers_agree(lookup, environment);
    // A job of one SLURM task (its batch script, or `srun -n 1`) is a
    // single process, which may still start --gpus N workers of its own.
    if (environment.launcher == Launcher::slurm && environment.world_size == 1) return std::nullopt;
    return environment;
  }
  return std::nullopt;
}

std::optional<WorkerEnvironment> worker_environment() {
  return worker_environment([](const char* name) { return std::getenv(name); });
}

}  // namespace plexus::train

#pragma once
// Data-parallel training runs one worker process per GPU. `plexus-ae train
// --gpus N` starts N copies of itself and supervises them; another launcher
// may start the workers itself by setting the same environment variables:
//   PLEXUS_RANK        this worker's rank, 0 .. N-1 (it trains on cuda:RANK)
//   PLEXUS_WORLD_SIZE  N
//   PLEXUS_RENDEZVOUS  a file path every worker sees, not existing yet:
//                      rank 0 writes NCCL's id there for the others
#include <optional>
#include <string>
#include <vector>

namespace plexus::ae {

inline constexpr const char* kRankVariable = "PLEXUS_RANK";
inline constexpr const char* kWorldSizeVariable = "PLEXUS_WORLD_SIZE";
inline constexpr const char* kRendezvousVariable = "PLEXUS_RENDEZVOUS";
// The most workers one launch starts.
inline constexpr int kMaxWorkers = 64;

struct WorkerEnvironment {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous_file;
};

// The worker variables of this process: nullopt when PLEXUS_RANK is not
// set; a ConfigError naming the variable when one is missing or invalid.
std::optional<WorkerEnvironment> worker_environment();

// Starts `command` (command[0]: the executable) `world_size` times, worker
// r with the variables above, and waits for all of them:
// - a worker that exits with a non-zero status (other than after a stop
//   request) or dies on a signal ends the run: the others are killed, and
//   an error names the rank and how it ended;
// - SIGINT or SIGTERM to this process is passed on once to every worker
//   (the workers agree on a step, save and exit); a second one kills them.
//   A worker still starting up, that the passed-on SIGINT ends, counts as
//   stopped, not failed.
// Returns kExitOk when every worker exited 0, kExitInterrupted after a
// stop request that every worker honoured, kExitError otherwise.
int supervise_workers(const std::vector<std::string>& command, int world_size, const std::string& rendezvous_file);

}  // namespace plexus::ae

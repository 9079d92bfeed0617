#pragma once
// How a worker of a data-parallel training run learns its place: from
// environment variables that supervise_workers (worker_launch.h) sets for
// each worker it starts, and that another launcher may set itself:
//   PLEXUS_RANK        this worker's rank, 0 .. N-1 (it trains on cuda:RANK)
//   PLEXUS_WORLD_SIZE  N
//   PLEXUS_RENDEZVOUS  a file path every worker sees, not existing yet:
//                      rank 0 writes NCCL's id there for the others
#include <optional>
#include <string>

namespace plexus::train {

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

}  // namespace plexus::train

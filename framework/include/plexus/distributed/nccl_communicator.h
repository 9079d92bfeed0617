#pragma once
// The NCCL communicator: one process per GPU. Rank 0 creates NCCL's unique
// id and writes it to a rendezvous file (atomically: temporary file, then
// rename), or sends it through share_unique_id (MPI); the other ranks wait
// for it, and every rank joins the communicator. The communicator is non-blocking, and every wait (joining,
// synchronize(), barrier(), shutting down) polls ncclCommGetAsyncError
// with a timeout: a peer that died or an NCCL error ends in an Error naming
// this rank, after ncclCommAbort, never in a hang. Collectives run on a
// stream of their own (see communicator.h).
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "plexus/distributed/communicator.h"

namespace plexus::distributed {

struct NcclSetup {
  int rank = 0;
  int world_size = 1;
  // A path on a file system every rank sees; it must not exist before the
  // job starts (a stale id would make ranks join an old job). Rank 0
  // removes it once every rank has joined.
  std::string rendezvous_file;
  // When set, used instead of the file: sends rank 0's id (`bytes` bytes at
  // `id`) to every rank's `id`, e.g. an MPI broadcast. Called on every rank.
  std::function<void(void* id, std::size_t bytes)> share_unique_id;
  int device = 0;  // the CUDA device of this rank
  double timeout_seconds = 300;
};

// True when this build has NCCL (PLEXUS_WITH_NCCL).
bool built_with_nccl();
// The NCCL version of this build ("2.28.9"), or "" without NCCL.
std::string nccl_version();
// Throws ConfigError in a build without NCCL, DeviceError on NCCL failures.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclSetup& setup);

}  // namespace plexus::distributed

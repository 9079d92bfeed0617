#pragma once
// The MPI communicator: CPU ranks that are processes started by an MPI
// launcher (mpirun, mpiexec, srun with PMI), over MPI_COMM_WORLD. Creating
// one initialises MPI (once per process); destroying it finalises MPI after
// a normal end. Sums are MPI_SUM over f32 or f64 buffers, which MPI
// implementations make identical on every rank (the replica checks would
// name a rank that drifted).
//
// Every collective is MPI's non-blocking one, waited for with a timeout: a
// rank that waits longer for its peers (one hangs, or died without the
// launcher ending the job) throws an Error naming itself and its host.
// After an error, abort_mpi_job ends every rank of the job; a rank that
// exits without it (killed, or exiting early) makes the launcher end the
// job (mpirun names the rank).
#include <cstddef>
#include <memory>
#include <string>

#include "plexus/distributed/communicator.h"

namespace plexus::distributed {

struct MpiSetup {
  // The rank and world size the launcher's variables gave: MPI must agree.
  int rank = 0;
  int world_size = 1;
  double timeout_seconds = 300;
};

class MpiCommunicator : public Communicator {
 public:
  // `bytes` bytes of root's `data` to every rank's `data` (NCCL's unique id,
  // to bootstrap NCCL through MPI), with the collectives' timeout.
  virtual void broadcast_bytes(void* data, std::size_t bytes, int root) = 0;
};

// True when this build has MPI (PLEXUS_WITH_MPI).
bool built_with_mpi();
// The MPI library's own one-line version ("Open MPI v4.1.4, ..."), or "" without MPI.
std::string mpi_version();
// Initialises MPI and joins MPI_COMM_WORLD. ConfigError in a build without
// MPI, or when MPI's rank or size differ from `setup`'s (another launcher's
// variables were read); Error when MPI fails.
std::unique_ptr<MpiCommunicator> make_mpi_communicator(const MpiSetup& setup);
// Ends every process of the MPI job (MPI_Abort) with `exit_code` when this
// process initialised MPI and has not finalised it; returns otherwise.
void abort_mpi_job(int exit_code);

}  // namespace plexus::distributed

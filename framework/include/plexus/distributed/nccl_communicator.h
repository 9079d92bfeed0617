#pragma once
// The NCCL communicator: one process per GPU. Rank 0 creates NCCL's unique
// id and writes it to a rendezvous file (atomically: temporary file, then
// rename), or sends it through share_unique_id (MPI, or the TCP rendezvous
// below); the other ranks wait for it, and every rank joins the communicator. The communicator is non-blocking, and
// every wait (joining, synchronize(), barrier(), shutting down) polls ncclCommGetAsyncError with a timeout: a peer that
// died or an NCCL error ends in an Error naming this rank, after ncclCommAbort, never in a hang. Collectives run on a
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

// The TCP rendezvous (tcp_rendezvous.cpp): how ranks started without MPI and
// without a shared file (torchrun, or any launcher that sets RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT) receive rank 0's bytes, NCCL's
// 128-byte unique id. Rank 0 listens on `port` on every IPv4 interface;
// every other rank connects to host:port, retrying until the timeout (rank 0
// may start later), and says who it is: a magic, the protocol's version, its
// rank, the world size and the bytes it expects. Once all world_size - 1
// ranks have arrived, rank 0 sends each the bytes, waits until every rank has
// confirmed them, then tells every rank that all have them (a barrier).
// A connection that does not start with the magic (a port scanner, another
// service) is refused and ignored; a Plexus rank whose version, world size,
// rank or byte count does not fit (another job on the same port, a
// mislaunched rank) ends the rendezvous on every rank, with an error naming
// the rank and its address. Every wait is bounded by the timeout: a rank that
// never comes makes rank 0 fail naming it, and rank 0 passes that on to the
// ranks that came.
struct TcpRendezvousSetup {
  std::string host;  // where the other ranks find rank 0 (MASTER_ADDR): an IPv4 address or host name
  int port = 0;      // rank 0 listens on it; 0 (tests): a free port, TcpRendezvousListener::port()
  int rank = 0;
  int world_size = 1;
  double timeout_seconds = 300;
};

// Rank 0's side. Listens from construction on, so that its port is known
// and taken before any other rank is told it: an IoError when the port is in
// use or cannot be bound, naming it.
class TcpRendezvousListener {
 public:
  explicit TcpRendezvousListener(const TcpRendezvousSetup& setup);
  ~TcpRendezvousListener();
  TcpRendezvousListener(const TcpRendezvousListener&) = delete;
  TcpRendezvousListener& operator=(const TcpRendezvousListener&) = delete;
  int port() const { return port_; }
  // Waits for the other ranks, sends each `bytes` bytes at `data` (at most
  // 64 KiB), and returns once every rank has them. IoError on a timeout or a
  // refused rank, after telling the ranks that came why.
  void send_to_every_rank(const void* data, std::size_t bytes);

 private:
  TcpRendezvousSetup setup_;
  int socket_ = -1;
  int port_ = 0;
};

// Another rank's side: connects to setup.host:setup.port and receives rank
// 0's `bytes` bytes into `data`; returns once every rank has them. IoError
// naming this rank and host:port when rank 0 cannot be reached within the
// timeout, refuses this rank, or does not answer in time.
void receive_from_tcp_rendezvous(const TcpRendezvousSetup& setup, void* data, std::size_t bytes);

// Rank 0 sends, the others receive (by setup.rank): a share_unique_id for
// NcclSetup.
void share_through_tcp_rendezvous(const TcpRendezvousSetup& setup, void* data, std::size_t bytes);

}  // namespace plexus::distributed

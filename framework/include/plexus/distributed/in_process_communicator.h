#pragma once
// InProcessGroup: ranks that are threads of one process, exchanging CPU
// tensors through shared memory. It runs the same data-parallel code as NCCL
// (gradient buckets, replica checks) without a GPU, which is how that code
// is tested; one rank alone is also a valid group (world size 1).
//
// Sums are taken in rank order 0, 1, ..., N-1, so every rank gets bitwise
// the same result. A rank that waits longer than the timeout for the others
// throws an Error; abort() (a failed rank's thread calls it) releases every
// waiting rank with an Error instead of leaving it blocked.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/distributed/communicator.h"

namespace plexus::distributed {

class InProcessGroup {
 public:
  // ConfigError for world_size < 1.
  explicit InProcessGroup(int world_size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  int world_size() const { return world_size_; }
  // The communicator of `rank`; each rank's thread uses its own.
  std::unique_ptr<Communicator> communicator(int rank);
  // Every rank waiting (now or later) throws an Error mentioning `reason`.
  void abort(const std::string& reason);

 private:
  friend class InProcessCommunicator;
  // Blocks until all ranks arrived; throws on timeout or abort.
  void arrive_and_wait(int rank, const char* what);
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  std::uint64_t generation_ = 0;
  std::string aborted_;
  // Each rank's buffer during a collective, and the reduced values.
  std::vector<Tensor*> buffers_;
  std::vector<std::int64_t> sizes_;
  std::vector<float> reduced_;
};

}  // namespace plexus::distributed

#pragma once
// Keeping the replicas of data-parallel training identical: every rank
// starts from rank 0's parameters, and a cheap fingerprint of the
// parameters is compared across ranks now and then, so replicas that drift
// apart (a nondeterministic kernel, a rank that skipped an update) stop the
// run loudly instead of training several different models.
#include <cstdint>
#include <vector>

#include "plexus/distributed/communicator.h"
#include "plexus/net.h"

namespace plexus::distributed {

// FNV-1a 64 over the names and, for each, lane_hash64 of the bytes of its
// values, in the order given (Net::parameters() is sorted by name). Copies
// the values to the host.
std::uint64_t parameter_fingerprint(const std::vector<NamedParameter>& parameters);

// Every rank's values become rank 0's. Collective.
void broadcast_parameters(Context& ctx, Communicator& communicator, const std::vector<NamedParameter>& parameters);

// Compares this rank's fingerprint with rank 0's on every rank. When any
// differs, every rank throws the same Error, naming the ranks that differ
// and `step`. Collective; waits for the device.
void check_replicas_agree(Context& ctx, Communicator& communicator, const std::vector<NamedParameter>& parameters,
                          std::int64_t step);

}  // namespace plexus::distributed

#pragma once
// Decisions the ranks of a data-parallel run must take alike, although each
// rank has its own clock and its own signals: whether to stop (any rank was
// asked to), whether a time limit is reached, how many seconds the run has
// taken (both by rank 0's clock) and after how many steps to agree next
// (rank 0's proposal). One small all-reduce; it waits for the device, so
// the GPUs idle while the host then sets up the next step: the training
// loop of plexus-ae agrees about every quarter of a second.
#include <cstdint>

#include "plexus/context.h"
#include "plexus/distributed/communicator.h"

namespace plexus::distributed {

struct Agreement {
  bool stop = false;               // true when any rank voted to stop
  bool out_of_time = false;        // rank 0's vote
  double seconds = 0;              // rank 0's clock (f32: about 7 significant digits)
  std::int64_t next_interval = 1;  // rank 0's: steps until the next agreement
};

// The most steps between two agreements.
constexpr std::int64_t kMaxAgreementInterval = 10000;

// The steps that take about `seconds` at `seconds_per_step`, in
// [1, kMaxAgreementInterval]; 10 while the pace is unknown
// (`seconds_per_step` 0, negative or not finite).
std::int64_t agreement_interval(double seconds, double seconds_per_step);

// Collective; waits for the device. `next_interval` counts only on rank 0,
// clamped to [1, kMaxAgreementInterval].
Agreement agree(Context& ctx, Communicator& communicator, bool stop, bool out_of_time, double seconds,
                std::int64_t next_interval);

}  // namespace plexus::distributed

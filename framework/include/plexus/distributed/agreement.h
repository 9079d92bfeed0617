#pragma once
// Decisions the ranks of a data-parallel run must take alike, although each
// rank has its own clock and its own signals: whether to stop (any rank was
// asked to), whether a time limit is reached and how many seconds the run
// has taken (both by rank 0's clock). One small all-reduce; the caller
// chooses how often (the training loop of plexus-ae: every 10 steps).
#include "plexus/context.h"
#include "plexus/distributed/communicator.h"

namespace plexus::distributed {

struct Agreement {
  bool stop = false;         // true when any rank voted to stop
  bool out_of_time = false;  // rank 0's vote
  double seconds = 0;        // rank 0's clock (f32: about 7 significant digits)
};

// Collective; waits for the device.
Agreement agree(Context& ctx, Communicator& communicator, bool stop, bool out_of_time, double seconds);

}  // namespace plexus::distributed

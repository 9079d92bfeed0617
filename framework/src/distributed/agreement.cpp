#include "plexus/distributed/agreement.h"

namespace plexus::distributed {

// A sum over the ranks of (stop, out_of_time, seconds), in which only rank 0
// contributes the last two.
Agreement agree(Context& ctx, Communicator& communicator, bool stop, bool out_of_time, double seconds) {
  const bool root = communicator.rank() == 0;
  Tensor votes = Tensor::from_values({stop ? 1.0 : 0.0, root && out_of_time ? 1.0 : 0.0, root ? seconds : 0.0}, {3},
                                     DType::f32, ctx.device());
  communicator.all_reduce(ctx, votes, Reduction::sum);
  communicator.synchronize();
  const std::vector<double> agreed = votes.to_values();
  return {agreed[0] > 0, agreed[1] > 0, agreed[2]};
}

}  // namespace plexus::distributed

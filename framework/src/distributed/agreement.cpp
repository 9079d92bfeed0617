#include "plexus/distributed/agreement.h"

#include <algorithm>
#include <cmath>

namespace plexus::distributed {

std::int64_t agreement_interval(double seconds, double seconds_per_step) {
  if (!(seconds_per_step > 0) || !std::isfinite(seconds_per_step)) return 10;
  const double steps = std::round(seconds / seconds_per_step);
  return static_cast<std::int64_t>(std::clamp(steps, 1.0, static_cast<double>(kMaxAgreementInterval)));
}

// A sum over the ranks of (stop, out_of_time, seconds, next_interval), in
// which only rank 0 contributes the last three.
Agreement agree(Context& ctx, Communicator& communicator, bool stop, bool out_of_time, double seconds,
                std::int64_t next_interval) {
  const bool root = communicator.rank() == 0;
  const auto interval = static_cast<double>(std::clamp<std::int64_t>(next_interval, 1, kMaxAgreementInterval));
  Tensor votes = Tensor::from_values(
      {stop ? 1.0 : 0.0, root && out_of_time ? 1.0 : 0.0, root ? seconds : 0.0, root ? interval : 0.0}, {4}, DType::f32,
      ctx.device());
  communicator.all_reduce(ctx, votes, Reduction::sum);
  communicator.synchronize();
  const std::vector<double> agreed = votes.to_values();
  return {agreed[0] > 0, agreed[1] > 0, agreed[2], static_cast<std::int64_t>(agreed[3])};
}

}  // namespace plexus::distributed

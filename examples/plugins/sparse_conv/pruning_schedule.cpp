// The pruning schedule and the magnitude mask (formulas in pruning_schedule.h).
#include "pruning_schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sparse_conv {

double PruningSchedule::sparsity_at(std::int64_t step) const {
  if (step < start_step) return 0.0;
  if (step >= end_step) return final_sparsity;
  const double progress = static_cast<double>(step - start_step) / static_cast<double>(end_step - start_step);
  return final_sparsity * (1.0 - std::pow(1.0 - progress, 3));
}

bool PruningSchedule::prunes_at(std::int64_t step) const {
  if (step < start_step || step > end_step) return false;
  return step == end_step || (step - start_step) % every == 0;
}

std::int64_t prune_by_magnitude(const std::vector<double>& weights, std::vector<double>& mask, double sparsity) {
  const std::size_t n = weights.size();
  const auto target = static_cast<std::size_t>(std::llround(sparsity * static_cast<double>(n)));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Magnitude of the weight as the mask leaves it: masked ones count as 0.
  auto magnitude = [&](std::size_t i) { return mask[i] == 0.0 ? 0.0 : std::abs(weights[i]); };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const double ma = magnitude(a), mb = magnitude(b);
    return ma != mb ? ma < mb : a < b;
  });
  std::int64_t zeros = 0;
  for (std::size_t rank = 0; rank < n; ++rank) {
    const std::size_t i = order[rank];
    if (rank < target || mask[i] == 0.0) mask[i] = 0.0;
    else mask[i] = 1.0;
    zeros += mask[i] == 0.0;
  }
  return zeros;
}

}  // namespace sparse_conv

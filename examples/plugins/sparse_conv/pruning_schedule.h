#pragma once
// Gradual magnitude pruning (Zhu & Gupta 2017, "To prune, or not to prune"):
// the target sparsity at update t rises from 0 at t0 = start_step to s_f at
// t1 = end_step along
//   s_t = s_f (1 - (1 - (t - t0) / (t1 - t0))^3)      t0 <= t <= t1
// (s_t = 0 before t0, s_f after t1): fast while many weights are redundant,
// slowly near the end. Every `every` updates in [t0, t1] (and at t1) the
// weights of smallest magnitude are masked until the layer's sparsity is s_t.
#include <cstdint>
#include <vector>

namespace sparse_conv {

struct PruningSchedule {
  double final_sparsity = 0.5;  // s_f in [0, 1)
  std::int64_t start_step = 0;  // t0
  std::int64_t end_step = 0;    // t1 >= t0; t1 == t0 prunes once, at t0
  std::int64_t every = 100;     // updates between two pruning steps

  // s_t above.
  double sparsity_at(std::int64_t step) const;
  // Whether the mask is recomputed after update `step`.
  bool prunes_at(std::int64_t step) const;
};

// The mask that zeroes the round(sparsity * n) weights of smallest |w|
// (ties broken by index, so the result does not depend on the sort), never
// reviving a weight `mask` already zeroed: mask_i = 0 for those, 1 for the
// rest. Already-masked weights are 0, hence smallest, so a rising sparsity
// only adds zeros to the mask. Returns the number of zeros.
std::int64_t prune_by_magnitude(const std::vector<double>& weights, std::vector<double>& mask, double sparsity);

}  // namespace sparse_conv

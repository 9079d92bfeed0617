#pragma once
// Gradient-norm clipping (PyTorch's clip_grad_norm_ with the 2-norm):
//   norm  = sqrt(sum over every parameter element of grad^2)
//   grad *= min(1, max_norm / (norm + 1e-6))
// On CUDA the norm, the factor and the scaling stay on the device, with no
// host synchronisation; the partial sums are added in a fixed order, so the
// result does not vary from run to run.
#include <vector>

#include "plexus/context.h"
#include "plexus/net.h"

namespace plexus {

class GradientClipper {
 public:
  explicit GradientClipper(double max_norm);  // throws ConfigError unless > 0 and finite
  double max_norm() const { return max_norm_; }
  // Scales every parameter gradient in place. All parameters live on one device.
  void clip(Context& ctx, const std::vector<NamedParameter>& parameters);
  // The global norm before the last clip(); on CUDA reading it copies one
  // number from the device (a synchronisation): read it when logging only.
  double last_norm() const;

 private:
  double max_norm_;
  double cpu_norm_ = 0;
  Tensor partials_;  // CUDA: per-block partial sums of squares (f64)
  Tensor result_;    // CUDA: [norm, factor] (f64)
};

}  // namespace plexus

#pragma once
// A fused activation (FusedActivation, plexus/layer.h) as the CUDA kernels
// of the layers that apply one (convolutions, Add) apply it to each value
// they write: the ReLU op's formula for negative_slope 0, else the LeakyReLU
// op's (elementwise/elementwise_ops.h): v for v > 0, otherwise 0 or
// negative_slope * v. Written out here with the test of `active` merged into
// that of v > 0, so that the kernels applying it compile to one branch per
// value (the ops' forward, called here, gave the convolution epilogues other
// code); elementwise_test checks that it agrees with the ops bit for bit, on
// the host, where this compiles too. Values from f32 or f64 sums.
// fused_activation.h is the CPU side.
#include "elementwise/elementwise_ops.h"

namespace plexus::layers {

template <typename T>
PLEXUS_ELEMENTWISE_FUNCTION T activated(T value, bool active, T negative_slope) {
  if (!active || value > T(0)) return value;
  return negative_slope == T(0) ? T(0) : negative_slope * value;
}

}  // namespace plexus::layers

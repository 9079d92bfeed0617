#pragma once
// A fused activation (FusedActivation, plexus/layer.h) as the CPU kernels of
// the layers that apply one (convolutions, Add) apply it, in place, by the
// formulas of ReLU's and LeakyReLU's own CPU kernels: max(v, 0), or v for
// v > 0, negative_slope * v otherwise. fused_activation.cuh is the CUDA side.
#include <type_traits>

#include <Eigen/Core>

#include "plexus/layer.h"

namespace plexus::layers {

// `values`: an Eigen array expression that can be assigned (a Map, or a
// matrix block's .array()).
template <typename Values>
void apply_fused_activation(Values&& values, const FusedActivation& activation) {
  using T = typename std::decay_t<Values>::Scalar;
  if (!activation.active) return;
  if (activation.negative_slope == 0) values = values.max(T(0));
  else values = (values > T(0)).select(values, T(activation.negative_slope) * values);
}

}  // namespace plexus::layers

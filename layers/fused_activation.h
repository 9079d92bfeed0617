#pragma once
// A fused activation (FusedActivation, plexus/layer.h) as the CPU kernels of
// the layers that apply one (convolutions, Add) apply it, in place: the
// formula of the ReLU op (negative_slope 0) or of the LeakyReLU op
// (elementwise/elementwise_ops.h), as those layers' own CPU passes compute
// it. fused_activation.cuh is the CUDA side.
#include <Eigen/Core>

#include "elementwise/elementwise_ops.h"
#include "plexus/layer.h"

namespace plexus::layers {

// `values`: an Eigen array expression that can be assigned (a Map, or a
// matrix block's .array()).
template <typename Values>
void apply_fused_activation(Values&& values, const FusedActivation& activation) {
  if (!activation.active) return;
  if (activation.negative_slope == 0) values = elementwise::ReLU{}.forward(values);
  else values = elementwise::LeakyReLU{activation.negative_slope}.forward(values);
}

}  // namespace plexus::layers

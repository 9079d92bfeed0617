#pragma once
// A fused activation (FusedActivation, plexus/layer.h) as the CUDA kernels
// of the layers that apply one (convolutions, Add) apply it to each value
// they write, by the formulas of ReLU's and LeakyReLU's own kernels: v for
// v > 0, otherwise 0 (ReLU, negative_slope 0) or negative_slope * v. Values
// from f32 or f64 sums. fused_activation.h is the CPU side.
namespace plexus::layers {

template <typename T>
__device__ inline T activated(T value, bool active, T negative_slope) {
  if (!active || value > T(0)) return value;
  return negative_slope == T(0) ? T(0) : negative_slope * value;
}

}  // namespace plexus::layers

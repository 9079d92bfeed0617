#pragma once
// The element-wise products a pruned layer needs, on the tensors' device
// (CPU loops here, CUDA kernels in masked_ops.cu). All tensors of one call
// have the same shape, dtype and device.
#include "plexus/context.h"
#include "plexus/tensor.h"

#ifndef PLEXUS_PLUGIN_WITH_CUDA
#define PLEXUS_PLUGIN_WITH_CUDA 0
#endif

namespace sparse_conv {

// out = a * mask (out may be a).
void multiply_by_mask(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out);
// out += a * mask.
void accumulate_masked(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out);

#if PLEXUS_PLUGIN_WITH_CUDA
namespace cuda {
void multiply_by_mask(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out);
void accumulate_masked(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out);
}  // namespace cuda
#endif

}  // namespace sparse_conv

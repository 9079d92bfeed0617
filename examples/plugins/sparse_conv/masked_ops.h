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

enum class MaskedWrite { overwrite, accumulate };

// out = a * mask (overwrite; out may be a) or out += a * mask (accumulate).
void masked_product(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out,
                    MaskedWrite write);

inline void multiply_by_mask(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask,
                             plexus::Tensor& out) {
  masked_product(ctx, a, mask, out, MaskedWrite::overwrite);
}
inline void accumulate_masked(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask,
                              plexus::Tensor& out) {
  masked_product(ctx, a, mask, out, MaskedWrite::accumulate);
}

#if PLEXUS_PLUGIN_WITH_CUDA
namespace cuda {
void masked_product(plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask, plexus::Tensor& out,
                    MaskedWrite write);
}  // namespace cuda
#endif

}  // namespace sparse_conv

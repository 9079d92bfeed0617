#pragma once
// The sparse convolution kernels (formulas in sparse_filter.h), CPU and CUDA.
// Every function OVERWRITES its destination tensor; the source and the
// destination are NCHW with the channels and sizes of `g`.
#include <memory>

#include "plexus/context.h"
#include "plexus/tensor.h"
#include "sparse_filter.h"

#ifndef PLEXUS_PLUGIN_WITH_CUDA
#define PLEXUS_PLUGIN_WITH_CUDA 0
#endif

namespace sparse_conv {

enum class SparseFormat { coo, rows };

// big -> small and small -> big on the CPU (sums in f64).
void to_small_cpu(const SparseFilter& filter, SparseFormat format, const ConvGeometry& g, const plexus::Tensor& big,
                  plexus::Tensor& small);
void to_big_cpu(const SparseFilter& filter, SparseFormat format, const ConvGeometry& g, const plexus::Tensor& small,
                plexus::Tensor& big);

#if PLEXUS_PLUGIN_WITH_CUDA
namespace cuda {
// The filter in device memory, in one dtype; made by upload().
struct DeviceFilter;
std::shared_ptr<DeviceFilter> upload(const SparseFilter& filter, plexus::DType dtype);
void to_small(plexus::Context& ctx, const DeviceFilter& filter, SparseFormat format, const ConvGeometry& g,
              const plexus::Tensor& big, plexus::Tensor& small);
void to_big(plexus::Context& ctx, const DeviceFilter& filter, SparseFormat format, const ConvGeometry& g,
            const plexus::Tensor& small, plexus::Tensor& big);
// out[n, c, ...] += bias[c].
void add_bias(plexus::Context& ctx, const plexus::Tensor& bias, plexus::Tensor& out);
}  // namespace cuda
#endif

}  // namespace sparse_conv

#pragma once
// CUDA reductions and broadcasts over NCHW channels, shared by Conv2d and
// ConvTranspose2d: bias add (and fused activation), bias gradient, and the sum over a batch of
// per-image weight gradients, and a masked convolution's zeroed taps. A
// tensor here is [N, C, P] with P = H*W.
#include <cstdint>

#include "plexus/context.h"
#include "plexus/layer.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// y[n, c, q] = activation(y[n, c, q] + bias[c]) in place (no bias: null; the
// activation as fused_activation.cuh applies it). Nothing to do: no launch.
template <typename T>
void add_channel_bias_cuda(const Context& ctx, const T* bias, const FusedActivation& activation, std::int64_t batch,
                           std::int64_t channels, std::int64_t plane_size, T* y);

// bias_grad[c] += sum over n, q of dy[n, c, q]
// Source is dy's element: T, or BFloat16 for an f32 bias whose dy is stored
// in bf16 (read natively, widened exactly, summed in f32 in the same order
// as from f32 elements of the same values, so the sums are the same bits).
template <typename T, typename Source>
void accumulate_channel_sums_cuda(const Context& ctx, const Source* dy, std::int64_t batch, std::int64_t channels,
                                  std::int64_t plane_size, T* bias_grad);

// destination[i] += sum over n < count of source[n*size + i]
template <typename T>
void accumulate_batch_sum_cuda(const Context& ctx, const T* source, std::int64_t count, std::int64_t size,
                               T* destination);

// w[n, t] = 0 for t >= first_zero_tap, over `kernels` kernels of `taps` taps
// each (a weight [O, C, k, k] has O*C kernels of k*k taps): a masked
// Conv2d's taps at and after the centre in raster order (conv2d.h).
template <typename T>
void zero_kernel_taps_cuda(const Context& ctx, std::int64_t kernels, std::int64_t taps, std::int64_t first_zero_tap,
                           T* w);
// The same taps moved between a weight and a compact copy [kernels, taps -
// first_tap]: to_compact, compact[n, t - first_tap] = w[n, t]; otherwise
// w[n, t] = compact[n, t - first_tap] (a masked Conv2d keeps its masked
// taps' gradient through backward, which adds to every tap).
template <typename T>
void copy_kernel_taps_cuda(const Context& ctx, std::int64_t kernels, std::int64_t taps, std::int64_t first_tap,
                           bool to_compact, T* w, T* compact);

}  // namespace plexus::layers

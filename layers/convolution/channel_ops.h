#pragma once
// CUDA reductions and broadcasts over NCHW channels, shared by Conv2d and
// ConvTranspose2d: bias add (and fused activation), bias gradient, and the sum over a batch of
// per-image weight gradients. A tensor here is [N, C, P] with P = H*W.
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

}  // namespace plexus::layers

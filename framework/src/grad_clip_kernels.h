#pragma once
// The CUDA half of gradient clipping (framework/src/cuda/grad_clip.cu; stubs
// at the end of grad_clip.cpp when built without CUDA).
#include <vector>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::cuda {

// Partial-sum blocks per gradient: partials needs grads.size() * this f64 elements.
inline constexpr int kClipPartialBlocks = 64;

// result[0] = sqrt(sum of grad^2 over all grads); result[1] = min(1, max_norm / (result[0] + 1e-6));
// every grad *= result[1]. Everything on the device, asynchronous.
void clip_gradients(Context& ctx, const std::vector<Tensor*>& grads, double max_norm, Tensor& partials, Tensor& result);

}  // namespace plexus::cuda

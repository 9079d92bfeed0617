#pragma once
// Scratch buffers kept between calls (column matrices, per-image weight
// gradients, NHWC copies, partial sums), so steady-state training allocates
// nothing.
#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// A layer's own buffer: allocated on first use and again only when the
// shape, dtype or device asked for changes.
inline Tensor& scratch_tensor(Tensor& cache, const Shape& shape, DType dtype, Device device) {
  if (!cache.defined() || cache.shape() != shape || cache.dtype() != dtype || cache.device() != device)
    cache = Tensor(shape, dtype, device);
  return cache;
}

// A buffer shared by the layers of one context (Context::shared_state), each
// asking for its own shape in turn: grown when too small, never shrunk, and
// a view of `shape` at its start returned. A growth replaces memory a
// recorded CUDA graph may hold, so it is noted on ctx (StepGraph then
// records again).
inline Tensor grown_scratch(const Context& ctx, Tensor& buffer, const Shape& shape, DType dtype) {
  const std::int64_t elements = shape_numel(shape);
  if (!buffer.defined() || buffer.numel() < elements || buffer.dtype() != dtype || buffer.device() != ctx.device()) {
    buffer = Tensor();  // the old memory goes back first
    buffer = Tensor(Shape{elements}, dtype, ctx.device());
    ctx.note_memory_replaced();
  }
  return buffer.elements_view(0, shape);
}

}  // namespace plexus::layers

#pragma once
// Scratch buffers a layer keeps between calls (column matrices, per-image
// weight gradients): allocated on first use and again only when the shape,
// dtype or device asked for changes, so steady-state training allocates nothing.
#include "plexus/tensor.h"

namespace plexus::layers {

inline Tensor& scratch_tensor(Tensor& cache, const Shape& shape, DType dtype, Device device) {
  if (!cache.defined() || cache.shape() != shape || cache.dtype() != dtype || cache.device() != device)
    cache = Tensor(shape, dtype, device);
  return cache;
}

}  // namespace plexus::layers

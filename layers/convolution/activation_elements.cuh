#pragma once
// Device loads and stores of activation elements: f32, or bf16 (BFloat16,
// plexus/bfloat16.h) where a tensor is stored in bf16. Loading widens
// exactly (a bf16 value is the upper half of an f32); storing rounds to the
// nearest bf16, ties to even, as convert() does. The copy kernels take the
// element type as a template argument, so one kernel reads either at its
// own width (2 bytes per bf16 element).
#include <cuda_bf16.h>

#include "plexus/tensor.h"

namespace plexus::layers {

__device__ inline float load_f32(const float* element) { return *element; }
__device__ inline float load_f32(const BFloat16* element) {
  return __uint_as_float(static_cast<unsigned>(element->bits) << 16);
}

__device__ inline void store_f32(float* element, float value) { *element = value; }
__device__ inline void store_f32(BFloat16* element, float value) {
  element->bits = __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

}  // namespace plexus::layers

#pragma once
// Activation elements in CUDA kernels: f32, or bf16 where a tensor is
// stored in bf16 (plexus/bfloat16.h). Loading widens exactly (a bf16 value
// is the upper half of an f32); storing rounds to the nearest bf16, ties to
// even, as convert() does.
//
// Activation tensors as an element-wise CUDA kernel sees them. With bf16
// activation storage (LayerTraits::stores_bf16) each input, output and gradient
// of a layer is f32 or bf16, each in its own dtype. A kernel takes every
// tensor as F32OrBf16Elements and computes in f32: load() widens a bf16
// element (exact), store() rounds to the nearest bf16, ties to even (as
// convert() and plexus/bfloat16.h do). The branch on `bf16` is the same in
// every thread, so one f32 instantiation serves every combination of
// dtypes. An f64 net runs the same kernel templates on F64Elements:
//
//   dispatch_activation_elements(x.dtype(), [&](auto kind) {
//     using Elements = decltype(kind);
//     kernel<<<blocks, threads, 0, stream>>>(Elements::of(&x), Elements::of(&y), n);
//   });
//
// of() takes a null tensor (a gradient not wanted) as one whose wanted() is
// false. It takes inputs and outputs alike: a kernel only loads its inputs.
#include <cstdint>

#include <cuda_bf16.h>

#include "plexus/tensor.h"

namespace plexus::layers {

// One element of a known type as f32, and an f32 value stored as one: the
// kernels that take the element type as a template argument (the
// convolutions' copies, GDN) read a bf16 tensor at its own width.
__device__ inline float load_f32(const float* element) { return *element; }
__device__ inline float load_f32(const BFloat16* element) {
  return __uint_as_float(static_cast<unsigned>(element->bits) << 16);
}
__device__ inline float load_f32(const __nv_bfloat16* element) { return __bfloat162float(*element); }

__device__ inline void store_f32(float* element, float value) { *element = value; }
__device__ inline void store_f32(BFloat16* element, float value) {
  element->bits = __bfloat16_as_ushort(__float2bfloat16_rn(value));
}
__device__ inline void store_f32(__nv_bfloat16* element, float value) { *element = __float2bfloat16_rn(value); }
// A bf16 value as its 16-bit pattern (the convolution engine's bf16 operand copies).
__device__ inline void store_f32(std::uint16_t* element, float value) {
  *element = __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// The elements of an f32 or a bf16 tensor, computed on in f32.
struct F32OrBf16Elements {
  using Value = float;
  void* data;  // float or __nv_bfloat16 elements; null: no tensor
  bool bf16;

  // An f64 tensor is an Error (Tensor::data): f64 nets take F64Elements.
  static F32OrBf16Elements of(const Tensor* tensor) {
    if (!tensor) return {nullptr, false};
    if (tensor->dtype() == DType::bf16) return {const_cast<void*>(tensor->raw_data()), true};
    return {const_cast<float*>(tensor->data<float>()), false};
  }

  __device__ bool wanted() const { return data != nullptr; }
  __device__ float load(long long i) const {
    return bf16 ? load_f32(static_cast<const __nv_bfloat16*>(data) + i) : load_f32(static_cast<const float*>(data) + i);
  }
  __device__ void store(long long i, float value) const {
    if (bf16) store_f32(static_cast<__nv_bfloat16*>(data) + i, value);
    else store_f32(static_cast<float*>(data) + i, value);
  }
};

// The elements of an f64 tensor (an f64 net stores no bf16).
struct F64Elements {
  using Value = double;
  double* data;  // null: no tensor

  static F64Elements of(const Tensor* tensor) {
    return {tensor ? const_cast<double*>(tensor->data<double>()) : nullptr};
  }

  __device__ bool wanted() const { return data != nullptr; }
  __device__ double load(long long i) const { return data[i]; }
  __device__ void store(long long i, double value) const { data[i] = value; }
};

// Runs `fn` with F64Elements{} for an f64 tensor, else F32OrBf16Elements{}
// (f32 or bf16: every tensor of the call is then f32 or bf16).
template <typename Fn>
void dispatch_activation_elements(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) fn(F64Elements{});
  else fn(F32OrBf16Elements{});
}

}  // namespace plexus::layers

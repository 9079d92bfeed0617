#pragma once
// TMA tensor maps for the engine's Hopper kernels (implicit_gemm_wgmma_tma.cu,
// implicit_gemm_wgmma_weight_grad.cu), encoded by the driver's
// cuTensorMapEncodeTiled, found once through the runtime (no link against libcuda).
#include <cuda.h>

#include <cstdint>

namespace plexus::layers::implicit_gemm::detail {

// A tiled tensor map over an array of `rank` dimensions (sizes in elements,
// innermost first; byte_strides[d] from one index of dimension d + 1 to the
// next, multiples of 16), of f32 or bf16 elements. A box spans box[d]
// elements of dimension d and takes every element_strides[d]-th of them
// (1 for the innermost), rows of box[0] elements (128, 64 or 32 bytes)
// swizzled over as many bytes, zeros where it reaches outside the array.
// Throws an Error naming `what` when the driver refuses the map.
CUtensorMap tiled_tensor_map(void* base, bool bf16, int rank, const std::uint64_t* sizes,
                             const std::uint64_t* byte_strides, const std::uint32_t* box,
                             const std::uint32_t* element_strides, const char* what);

}  // namespace plexus::layers::implicit_gemm::detail

// TMA tensor maps (tensor_maps.h).
#include "convolution/tensor_maps.h"

#include <cudaTypedefs.h>

#include <string>

#include "plexus/cuda/cuda_check.h"
#include "plexus/error.h"

namespace plexus::layers::implicit_gemm::detail {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cuda::check_cuda(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000, cudaEnableDefault, &found),
        "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", __FILE__, __LINE__);
    if (found != cudaDriverEntryPointSuccess || pointer == nullptr)
      throw Error("the CUDA driver has no cuTensorMapEncodeTiled (needed by the Hopper convolution kernels)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  }();
  return function;
}

}  // namespace

CUtensorMap tiled_tensor_map(void* base, bool bf16, int rank, const std::uint64_t* sizes,
                             const std::uint64_t* byte_strides, const std::uint32_t* box,
                             const std::uint32_t* element_strides, const char* what) {
  const std::uint64_t row_bytes = box[0] * (bf16 ? 2 : 4);
  const CUtensorMapSwizzle swizzle = row_bytes == 32   ? CU_TENSOR_MAP_SWIZZLE_32B
                                     : row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMap map;
  const CUresult result = encode_tiled()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<cuuint32_t>(rank),
      base, sizes, byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw Error(std::string("cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                std::to_string(static_cast<int>(result)) + ")");
  return map;
}

}  // namespace plexus::layers::implicit_gemm::detail

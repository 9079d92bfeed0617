// f32 -> bf16 rounding of GEMM operands (bf16_round.h).
#include <cuda_bf16.h>

#include "bf16_round.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::cuda {

namespace {

// to[i] = round_to_nearest_even_bf16(from[i]) (__float2bfloat16_rn).
__global__ void round_to_bf16_kernel(const float* from, long long count, __nv_bfloat16* to) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    to[i] = __float2bfloat16_rn(from[i]);
}

}  // namespace

// Element-wise and memory-bound: a grid-stride loop of 256-thread blocks.
void round_to_bf16(const Context& ctx, const float* from, long long count, void* to) {
  if (count <= 0) return;
  round_to_bf16_kernel<<<blocks_for(count), 256, 0, stream(ctx)>>>(from, count, static_cast<__nv_bfloat16*>(to));
  check_launch("round_to_bf16_kernel", __FILE__, __LINE__);
}

}  // namespace plexus::cuda

#pragma once
// f32 -> bf16 operand rounding for cuda::gemm under bf16 products (blas.cpp).
#include "plexus/context.h"

namespace plexus::cuda {

// to[i] = bf16(from[i]) for i < count, rounded to nearest even, on the
// context's stream. `to` holds count __nv_bfloat16 values (2 bytes each).
void round_to_bf16(const Context& ctx, const float* from, long long count, void* to);

}  // namespace plexus::cuda

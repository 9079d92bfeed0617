#pragma once
// Shared-memory operations of tensor-core kernels on bf16 tiles (include
// from .cu files only, compute capability >= 8.0): 16-byte asynchronous
// copies from global memory and ldmatrix fragment loads of 8x8 b16 matrices.
#include <cuda_bf16.h>

namespace plexus::cuda {

__device__ inline unsigned shared_address_of(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte asynchronous copy global -> shared (both 16-byte aligned),
// bypassing L1; when !valid it writes zeros and reads nothing.
__device__ inline void copy16_async_or_zero(void* shared, const void* global, bool valid) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address_of(shared)), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  __trap();
#endif
}

// Closes the thread's asynchronous copies issued so far into one group.
__device__ inline void commit_async_copies() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits for all of the thread's asynchronous copies (a barrier then shows
// them to the block).
__device__ inline void wait_all_async_copies() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Four 8x8 b16 matrices: lane l gives the address of row l%8 of matrix l/8
// (16 bytes) and receives from each matrix q, in r[q], the two elements at
// (row lane/4, columns 2*(lane%4) and +1).
__device__ inline void load_matrices_x4(unsigned (&r)[4], const __nv_bfloat16* row_address) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address_of(row_address)));
#else
  __trap();
#endif
}

// The same, transposed: from each matrix the elements at (rows
// 2*(lane%4) and +1, column lane/4).
__device__ inline void load_matrices_x4_transposed(unsigned (&r)[4], const __nv_bfloat16* row_address) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address_of(row_address)));
#else
  __trap();
#endif
}

}  // namespace plexus::cuda

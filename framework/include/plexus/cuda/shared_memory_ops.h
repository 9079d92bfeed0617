#pragma once
// Shared-memory operations of the tensor-core kernels (include from .cu
// files only; the kernels that use them run on compute capability >= 8.0):
// asynchronous copies from global memory (cp.async) and ldmatrix fragment
// loads. The copies carry no "memory" clobber: their kernels make the data
// visible with cp.async waits followed by __syncthreads().
namespace plexus::cuda {

__device__ inline unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 4-byte asynchronous copy global -> shared; when !valid it writes 0 and reads nothing.
__device__ inline void copy4_async(void* destination, const void* source, bool valid) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(destination)), "l"(source),
               "r"(valid ? 4 : 0));
#else
  __trap();
#endif
}

// 8-byte asynchronous copy (both addresses 8-byte aligned); when !valid it
// writes zeros and reads nothing.
__device__ inline void copy8_async_zfill(void* destination, const void* source, bool valid) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(shared_address(destination)), "l"(source),
               "r"(valid ? 8 : 0));
#else
  __trap();
#endif
}

// 16-byte asynchronous copy (both addresses 16-byte aligned), bypassing L1.
__device__ inline void copy16_async(void* destination, const void* source) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(destination)), "l"(source));
#else
  __trap();
#endif
}

// 16-byte asynchronous copy; when !valid it writes zeros and reads nothing.
__device__ inline void copy16_async_zfill(void* destination, const void* source, bool valid) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)), "l"(source),
               "r"(valid ? 16 : 0));
#else
  __trap();
#endif
}

// Closes the thread's copies issued so far into one group.
__device__ inline void commit_async() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ inline void wait_async() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
#endif
}

// Four 8x8 b16 matrices in one instruction: lane l gives the address of row
// l%8 of matrix l/8 (16 bytes) and receives from each matrix q, in r[q], the
// 32 bits at (row lane/4, columns 2*(lane%4) and +1): two bf16, or, for f32
// tiles read as b16, the f32 at (row lane/4, column lane%4) of an 8x4 matrix.
__device__ inline void load_matrix_x4(unsigned (&r)[4], const void* row_address) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
#else
  __trap();
#endif
}

// The same, transposed: from each matrix the elements at (rows 2*(lane%4)
// and +1, column lane/4), i.e. two consecutive rows of one column.
__device__ inline void load_matrix_x4_trans(unsigned (&r)[4], const void* row_address) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
#else
  __trap();
#endif
}

}  // namespace plexus::cuda

#pragma once
// The two tensor-core products that kernels written on TF32 mma.sync
// fragments can run (include from .cu files only): the convolution engine
// and the GDN kernels pick one by the Context's precision.
namespace plexus::cuda {

// d += a b for one 16x8x8 tile. a and b hold f32 bit patterns; the tensor core
// reads them as TF32 (the low 13 mantissa bits are dropped).
__device__ inline void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // hosts pick tensor-core kernels only on compute capability >= 8.0
#endif
}

// d += a b for one 16x8x16 tile of bf16 operands (two per register, the
// lower k in the low half), f32 accumulation.
__device__ inline void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// Two f32 (bit patterns) rounded to bf16, nearest even, packed: low in bits 0-15.
__device__ inline unsigned pack_bf16x2(unsigned low, unsigned high) {
  unsigned packed;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(__uint_as_float(high)), "f"(__uint_as_float(low)));
#else
  packed = 0;
  __trap();
#endif
  return packed;
}

// Both products consume the same fragments, read from the same f32 tiles in
// shared memory: kGroups m16n8k8 TF32 fragment sets, set i at k offset 8i of
// the step (a = A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4); b = B(t, g),
// B(t+4, g); g = lane/4, t = lane%4).
//
// Tf32Product: one m16n8k8 TF32 mma per fragment set.
struct Tf32Product {
  static constexpr int kGroups = 1;
  __device__ static void multiply(float (&d)[4], const unsigned (&a)[1][4], const unsigned (&b)[1][2]) {
    mma_tf32(d, a[0], b[0]);
  }
};

// Bf16Product: one m16n8k16 BF16 mma over both sets, operands rounded to bf16
// here, as the fragments are formed. The mma wants thread t to hold k = 2t,
// 2t+1 (and 2t+8, 2t+9) of its rows and columns; it holds k = t, t+4 (and
// t+8, t+12) instead. A sum over k does not depend on the order of its terms,
// so the mma's k 2t, 2t+1, 2t+8, 2t+9 are taken to mean the tile's k t, t+4,
// t+8, t+12 in A and in B alike: the product is the same, with no shuffle.
struct Bf16Product {
  static constexpr int kGroups = 2;
  __device__ static void multiply(float (&d)[4], const unsigned (&a)[2][4], const unsigned (&b)[2][2]) {
    const unsigned a16[4] = {pack_bf16x2(a[0][0], a[0][2]), pack_bf16x2(a[0][1], a[0][3]),
                             pack_bf16x2(a[1][0], a[1][2]), pack_bf16x2(a[1][1], a[1][3])};
    const unsigned b16[2] = {pack_bf16x2(b[0][0], b[0][1]), pack_bf16x2(b[1][0], b[1][1])};
    mma_bf16(d, a16, b16);
  }
};

}  // namespace plexus::cuda

#pragma once
// The CPU matrix products' blocking, fixed, and the instruction set they were
// compiled for, checked against the processor (src/cpu_gemm_blocking.cpp).

namespace plexus {

// Sets Eigen's cache sizes, from which it derives the blocking of every
// matrix product, to constants instead of what the processor reports. Eigen
// sums a product's K dimension block by block, so the block size decides
// the order of the additions: with the processor's own cache sizes the CPU
// kernels' results, and so a training run's, differed between machines.
// Idempotent and thread-safe; the Context constructor calls it, and so does
// any code that runs Eigen products before a Context may exist (the codec's
// coding tables and integer-network calibration).
void fix_cpu_gemm_blocking();

// The error for a build that uses instructions the processor lacks, or
// nullptr when it can run: `built_with_*` say what the code was compiled for
// (__AVX2__, __FMA__: -DPLEXUS_CPU_ARCH=auto gives both), `cpu_has_*` what
// the processor supports. libplexus checks this as it loads, before any of
// its other code runs, and exits with the message (status 1) if there is one.
const char* missing_instruction_set_message(bool built_with_avx2, bool built_with_fma, bool cpu_has_avx2,
                                            bool cpu_has_fma);

}  // namespace plexus

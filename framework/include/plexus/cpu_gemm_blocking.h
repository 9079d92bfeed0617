#pragma once
// The CPU matrix products' blocking, fixed (src/cpu_gemm_blocking.cpp).

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

}  // namespace plexus

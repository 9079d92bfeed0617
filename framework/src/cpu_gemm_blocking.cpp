#include "plexus/cpu_gemm_blocking.h"

#include <mutex>

#include <Eigen/Core>

namespace plexus {

void fix_cpu_gemm_blocking() {
  static std::once_flag once;
  std::call_once(once, [] {
    // What Eigen 3.4 reads from the 2-core AMD EPYC machines the README's
    // numbers and the tests' stored values come from: 32 KiB L1, 512 KiB
    // L2, 256 MiB L3 per its query. Any constant gives every machine the
    // same sums; these keep those numbers.
    Eigen::setCpuCacheSizes(32 * 1024, 512 * 1024, 256 * 1024 * 1024);
  });
}

}  // namespace plexus

// KernelTimeline for builds whose CUDA toolkit has no CUPTI: it refuses to
// record, saying why.
#include "kernel_timeline.h"

#include "plexus/error.h"

namespace plexus::bench {

KernelTimeline::KernelTimeline() {
  throw DeviceError("this plexus-bench was built without CUPTI (the CUDA toolkit's profiling library), so it "
                    "cannot record a kernel timeline; install it (Debian: cuda-cupti-dev) and rebuild");
}
KernelTimeline::~KernelTimeline() = default;
std::uint64_t KernelTimeline::now_ns() { return 0; }
std::vector<KernelRecord> KernelTimeline::finish() { return {}; }

}  // namespace plexus::bench

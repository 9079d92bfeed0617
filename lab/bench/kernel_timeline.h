#pragma once
// The kernels, memsets and copies a GPU ran while a KernelTimeline was
// recording, each with its stream and its start and end on the GPU's clock,
// from CUPTI's activity records of kinds CONCURRENT_KERNEL (kernels of
// different streams keep running side by side), MEMSET and MEMCPY; work
// replayed from a CUDA graph is recorded too. For plexus-bench --timeline;
// one recorder per process at a time.
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::bench {

struct KernelRecord {
  std::string name;  // a kernel's demangled name, or "memset N bytes", "memcpy N bytes"
  std::uint32_t stream = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
};

class KernelTimeline {
 public:
  KernelTimeline();  // starts recording; DeviceError when CUPTI refuses
  ~KernelTimeline();
  KernelTimeline(const KernelTimeline&) = delete;
  KernelTimeline& operator=(const KernelTimeline&) = delete;

  // The GPU clock's time now, in the records' unit (ns).
  static std::uint64_t now_ns();
  // Everything that has finished since the start (call after a device
  // synchronisation), ordered by start; stops recording.
  std::vector<KernelRecord> finish();

 private:
  bool recording_ = true;
};

}  // namespace plexus::bench

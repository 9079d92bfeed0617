// Whether kernels overlap their predecessor's tail
// (plexus/cuda/overlapped_launch.h).
#include "plexus/cuda/overlapped_launch.h"

#include <atomic>

#include "plexus/environment_switch.h"

namespace plexus::cuda {

bool overlapped_launches(const Context &ctx) {
  constexpr int kDevices = 64;
  static std::atomic<int> decided[kDevices]; // 0 unknown, 1 no, 2 yes
  static const bool allowed =
      !switched_off_by_environment("PLEXUS_OVERLAPPED_LAUNCH");
  const int device = resources(ctx).device;
  if (device >= 0 && device < kDevices && decided[device].load() != 0)
    return decided[device].load() == 2;
  int major = 0;
  check_cuda(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
      "cudaDeviceGetAttribute(compute capability)", __FILE__, __LINE__);
  const bool overlapped = allowed && major >= 9;
  if (device >= 0 && device < kDevices)
    decided[device].store(overlapped ? 2 : 1);
  return overlapped;
}

} // namespace plexus::cuda

#include "plexus/context.h"

#include "backend.h"

namespace plexus {

Context::Context(Device device, std::uint64_t seed) : device_(device) {
  if (device.is_cuda())
    cuda_ = {cuda::create_resources(device.index, seed), &cuda::destroy_resources};
  reseed(seed);
}

Context::~Context() = default;

void Context::reseed(std::uint64_t seed) {
  seed_ = seed;
  random_.seed(seed);
  if (cuda_) cuda::reseed(*cuda_, seed);
}

void Context::set_allow_tf32(bool allow) {
  allow_tf32_ = allow;
  if (cuda_) cuda::set_tf32(*cuda_, allow);
}

void Context::synchronize() {
  if (cuda_) cuda::synchronize(*cuda_);
}

bool cuda_available() { return device_memory::cuda_device_count() > 0; }
bool built_with_cuda() { return device_memory::built_with_cuda(); }

}  // namespace plexus

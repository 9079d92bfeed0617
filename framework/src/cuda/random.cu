// The device half of Context::reseed: the seed that cuda::device_random
// hands to kernels lives in device memory, so a replayed CUDA graph reads
// whatever seed the last reseed wrote.
#include "../backend.h"
#include "plexus/cuda/cuda_check.h"

namespace plexus::cuda {

namespace {

__global__ void write_seed_kernel(std::uint64_t* seed_on_device, std::uint64_t seed) { *seed_on_device = seed; }

}  // namespace

// One thread: the whole job is one 8-byte store, ordered on the stream.
void write_seed(void* stream, std::uint64_t* seed_on_device, std::uint64_t seed) {
  write_seed_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(seed_on_device, seed);
  check_launch("write_seed_kernel", __FILE__, __LINE__);
}

}  // namespace plexus::cuda

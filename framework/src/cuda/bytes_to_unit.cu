// A batch's 8-bit values to f32 on the device: values[i] = bytes[i] / 255.
// The division is IEEE (nvcc's default -prec-div=true), so the result equals
// the CPU's bytes_to_unit bit for bit.
#include "../data/bytes_to_unit_kernel.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::cuda {

namespace {

__global__ void bytes_to_unit_kernel(const std::uint8_t* bytes, float* values, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    values[i] = static_cast<float>(bytes[i]) / 255.0f;
}

}  // namespace

// Element-wise and memory-bound: a grid-stride loop of 256-thread blocks.
void bytes_to_unit(void* stream, const std::uint8_t* bytes, float* values, std::size_t count) {
  const long long n = static_cast<long long>(count);
  if (n == 0) return;
  bytes_to_unit_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(bytes, values, n);
  check_launch("bytes_to_unit_kernel", __FILE__, __LINE__);
}

}  // namespace plexus::cuda

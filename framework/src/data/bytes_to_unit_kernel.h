#pragma once
// The device half of DeviceInput's conversion (framework/src/cuda/bytes_to_unit.cu,
// built with CUDA only): the batch travels to the GPU as 8-bit values, a
// quarter of the f32 bytes, and becomes f32 there.
#include <cstddef>
#include <cstdint>

namespace plexus::cuda {

// values[i] = bytes[i] / 255 in f32, correctly rounded (the same as the
// CPU's data::bytes_to_unit), enqueued on `stream` (a cudaStream_t).
void bytes_to_unit(void* stream, const std::uint8_t* bytes, float* values, std::size_t count);

}  // namespace plexus::cuda

#pragma once
// The CUDA half of codec::scale_indices (plexus/codec/integer_network.h).
#include <cstdint>
#include <vector>

#include "plexus/codec/integer_network.h"
#include "plexus/error.h"

namespace plexus::codec {

#if PLEXUS_WITH_CUDA
// The same integers as the CPU path, computed on GPU `device`.
std::vector<std::int32_t> scale_indices_cuda(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                             std::int64_t height, std::int64_t width, int device);
#else
inline std::vector<std::int32_t> scale_indices_cuda(const IntegerNetwork&, const std::vector<std::int32_t>&,
                                                    std::int64_t, std::int64_t, int) {
  throw DeviceError("integer hyper-synthesis on CUDA: this Plexus was built without CUDA");
}
#endif

}  // namespace plexus::codec

#pragma once
// What the CPU and CUDA halves of codec::run_network (plexus/codec/integer_network.h) share.
#include <cstdint>
#include <utility>
#include <vector>

#include "integer_arithmetic.h"
#include "plexus/codec/integer_network.h"
#include "plexus/error.h"

namespace plexus::codec {

// The sides (height, width) of every tensor for an input of height x width.
std::vector<std::pair<std::int64_t, std::int64_t>> tensor_sides(const IntegerNetwork& network, std::int64_t height,
                                                                 std::int64_t width);

// The input as int64, each value clamped to +-32767.
std::vector<std::int64_t> clamped_input(const std::vector<std::int32_t>& input);

inline arithmetic::ConvView conv_view(const IntegerConvLayer& layer, const std::int32_t* weight,
                                      const std::int64_t* bias, std::int64_t in_height, std::int64_t in_width) {
  return arithmetic::ConvView{weight,        bias,         layer.transposed ? 1 : 0, layer.in_channels,
                              layer.out_channels, layer.kernel, layer.stride,  layer.padding,
                              in_height,     in_width};
}

#if PLEXUS_WITH_CUDA
// The same integers as the CPU path, computed on GPU `device`.
IntegerOutputs run_network_cuda(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                std::int64_t height, std::int64_t width, int device);
#else
inline IntegerOutputs run_network_cuda(const IntegerNetwork&, const std::vector<std::int32_t>&, std::int64_t,
                                       std::int64_t, int) {
  throw DeviceError("integer network on CUDA: this Plexus was built without CUDA");
}
#endif

}  // namespace plexus::codec

#pragma once
// What IntegerNetworkRunner (plexus/codec/integer_network.h) asks of a
// device: the network's parameters prepared there once, and one image's
// tensors, each computed when the runner first needs it. The CPU backend is
// integer_network_cpu.cpp, the CUDA one integer_network.cu; both evaluate
// integer_arithmetic.h's formulas, so they compute the same integers.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "plexus/codec/integer_network.h"
#include "network_structure.h"
#include "plexus/error.h"

namespace plexus::codec {

// The sides of every tensor for a hyper-latent of height x width; input
// nodes are of the scales' size (ShapeError when sizes do not work out).
std::vector<Side> tensor_sides(const IntegerNetwork& network, std::int64_t height, std::int64_t width);

class IntegerNetworkRunner::Backend {
 public:
  virtual ~Backend() = default;
  // A new image of these tensor sides: every tensor is forgotten.
  virtual void reset(const std::vector<Side>& sides) = 0;
  // Tensor `tensor` is `values` (the hyper-latent, clamped; an input node's).
  virtual void set(std::int32_t tensor, const std::vector<std::int64_t>& values) = 0;
  // Computes tensor `tensor`, the output of node tensor - 1, whose inputs are computed.
  virtual void compute(std::int32_t tensor) = 0;
  // `count` values of a computed tensor from `offset`.
  virtual std::vector<std::int64_t> read(std::int32_t tensor, std::int64_t offset, std::int64_t count) = 0;
  // The table indices of `count` values of the scales tensor from `offset`,
  // whose first channel is channel `channel` of the network's scales, and
  // the means of as many values of `means_tensor` from `means_offset` (none when it is -1).
  virtual IntegerOutputs outputs(std::int32_t scales_tensor, std::int64_t offset, std::int32_t means_tensor,
                                 std::int64_t means_offset, std::int64_t count, std::int32_t channel,
                                 std::int64_t plane) = 0;
};

std::unique_ptr<IntegerNetworkRunner::Backend> make_cpu_backend(const IntegerNetwork& network);
#if PLEXUS_WITH_CUDA
std::unique_ptr<IntegerNetworkRunner::Backend> make_cuda_backend(const IntegerNetwork& network, int device);
#else
inline std::unique_ptr<IntegerNetworkRunner::Backend> make_cuda_backend(const IntegerNetwork&, int) {
  throw DeviceError("integer network on CUDA: this Plexus was built without CUDA");
}
#endif

}  // namespace plexus::codec

#pragma once
// Checked integer arithmetic for shapes and sizes, and the named limits that
// bound them. Every size computed from user input (a model spec, a file
// header, a command-line option) goes through these, so an absurd value is
// a clear error naming the quantity instead of a wrapped-around size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plexus/error.h"

namespace plexus {

namespace limits {
// Elements of one tensor: 2^34 (64 GiB of f32), far above any model here.
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 34;
// Channels or features of a layer's parameter (out_channels, out_features,
// vocab_size).
inline constexpr std::int64_t kMaxChannels = 65536;
// A convolution's kernel side, stride, padding and output_padding.
inline constexpr std::int64_t kMaxConvolutionParameter = 4096;
// Training steps (a checkpoint's step and optimiser step count, --steps):
// 2^50, so step arithmetic and step * batch never overflow.
inline constexpr std::int64_t kMaxSteps = std::int64_t{1} << 50;
// Tensors in one safetensors file: 2^16. The largest models have a few
// thousand parameter tensors, three times that with Adam state; a header
// with more entries is refused before it is parsed into memory.
inline constexpr std::int64_t kMaxCheckpointTensors = std::int64_t{1} << 16;
}  // namespace limits

// a + b and a * b, or ShapeError "<what> overflows: a * b" when the exact
// result does not fit in 64 bits.
std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what);
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what);
// a * b for sizes in bytes.
std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& what);

}  // namespace plexus

#pragma once
// Symmetric int8 weights with an f32 scale per output channel, to store a
// weight tensor in a quarter of its f32 size (safetensors dtype "I8", with
// the scales in an F32 tensor "<name>.int8_scale"; plexus/checkpoint.h).
//
// For output channel c of a weight w:
//   scale_c = max_j |w_cj| / 127         (one f32 division; 0 for a channel of zeros)
//   q_cj    = round_half_even(w_cj / scale_c), in [-127, 127]   (0 when scale_c = 0)
//   w'_cj   = float(q_cj) * scale_c      (one f32 multiply: the same f32 on every machine)
// The scale tensor has the weight's rank, with size 1 on every axis but
// the channel axis, so that q * scale broadcasts as in numpy or PyTorch.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/tensor.h"

namespace plexus {

// The name of the scale tensor of the I8 tensor `name`: "<name>.int8_scale".
std::string int8_scale_name(const std::string& name);
// True for a name ending in ".int8_scale" (a name safetensors files reserve for scales).
bool is_int8_scale_name(const std::string& name);

// A tensor as stored in int8: q in row-major order, and the scales.
struct Int8Tensor {
  Shape shape;                      // the weight's
  std::vector<std::int8_t> values;  // q, shape's element count of them
  Tensor scale;                     // f32 on the CPU, shape int8_scale_shape(shape, channel axis)
};

// `shape` with 1 on every axis but `channel_axis`.
Shape int8_scale_shape(const Shape& shape, int channel_axis);

// Quantises `tensor` (f32 or f64, any device; rank >= 1) per index of
// `channel_axis` as above. Throws Error naming `name` for an axis out of
// range or a value that is not finite or too large (127 * scale must stay
// a finite f32).
Int8Tensor quantize_int8(const Tensor& tensor, int channel_axis, const std::string& name);

// w' = float(q) * scale, broadcasting the scale: an f32 tensor on the CPU.
// `scale_shape` has the rank of `shape`, each dimension 1 or equal to
// shape's (the caller checks; load_safetensors does).
Tensor dequantize_int8(const std::int8_t* q, const Shape& shape, const float* scale, const Shape& scale_shape);
Tensor dequantize_int8(const Int8Tensor& stored);

}  // namespace plexus

#include "plexus/int8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "plexus/error.h"

namespace plexus {

namespace {
constexpr const char* kScaleSuffix = ".int8_scale";
constexpr float kLevels = 127.0f;  // the symmetric range [-127, 127]; -128 is never written
}  // namespace

std::string int8_scale_name(const std::string& name) { return name + kScaleSuffix; }

bool is_int8_scale_name(const std::string& name) {
  const std::string suffix = kScaleSuffix;
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Shape int8_scale_shape(const Shape& shape, int channel_axis) {
  Shape scale(shape.size(), 1);
  scale.at(static_cast<std::size_t>(channel_axis)) = shape[static_cast<std::size_t>(channel_axis)];
  return scale;
}

Int8Tensor quantize_int8(const Tensor& tensor, int channel_axis, const std::string& name) {
  const Shape& shape = tensor.shape();
  if (channel_axis < 0 || channel_axis >= static_cast<int>(shape.size()))
    throw Error("tensor '" + name + "' " + shape_str(shape) + " has no axis " + std::to_string(channel_axis) +
                " to quantise to int8 along");
  const std::vector<double> values = tensor.to_values();
  // Element i of a row-major tensor lies in channel (i / inner) % channels.
  std::int64_t inner = 1;
  for (std::size_t d = static_cast<std::size_t>(channel_axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t channels = shape[static_cast<std::size_t>(channel_axis)];
  auto channel_of = [&](std::size_t i) { return static_cast<std::int64_t>(i) / inner % channels; };

  std::vector<float> largest(static_cast<std::size_t>(channels), 0.0f);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float value = static_cast<float>(values[i]);
    if (!std::isfinite(value)) {
      std::ostringstream text;
      text << "tensor '" << name << "' element " << i << " is " << values[i] << ", which int8 storage cannot hold";
      throw Error(text.str());
    }
    float& m = largest[static_cast<std::size_t>(channel_of(i))];
    m = std::max(m, std::fabs(value));
  }
  Int8Tensor result;
  result.shape = shape;
  result.scale = Tensor(int8_scale_shape(shape, channel_axis), DType::f32, Device::cpu());
  float* scale = result.scale.data<float>();
  for (std::int64_t c = 0; c < channels; ++c) {
    scale[c] = largest[static_cast<std::size_t>(c)] / kLevels;
    if (static_cast<double>(scale[c]) * kLevels > std::numeric_limits<float>::max())
      throw Error("tensor '" + name + "' has values too large for int8 storage (127 * scale overflows f32)");
  }
  result.values.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float s = scale[channel_of(i)];
    // nearbyint rounds half to even in the default rounding mode.
    const float q = s == 0.0f ? 0.0f : std::nearbyint(static_cast<float>(values[i]) / s);
    result.values[i] = static_cast<std::int8_t>(std::max(-kLevels, std::min(kLevels, q)));
  }
  return result;
}

Tensor dequantize_int8(const std::int8_t* q, const Shape& shape, const float* scale, const Shape& scale_shape) {
  Tensor result(shape, DType::f32, Device::cpu());
  float* out = result.data<float>();
  const std::size_t rank = shape.size();
  // The scale's row-major strides, 0 along the axes it broadcasts over.
  std::vector<std::int64_t> stride(rank, 0);
  std::int64_t step = 1;
  for (std::size_t d = rank; d-- > 0;) {
    if (scale_shape[d] != 1) stride[d] = step;
    step *= scale_shape[d];
  }
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t at = 0;  // the scale element of `index`
  const std::int64_t n = result.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(q[i]) * scale[at];
    for (std::size_t d = rank; d-- > 0;) {  // next index, last axis fastest
      at += stride[d];
      if (++index[d] < shape[d]) break;
      at -= stride[d] * shape[d];
      index[d] = 0;
    }
  }
  return result;
}

Tensor dequantize_int8(const Int8Tensor& stored) {
  return dequantize_int8(stored.values.data(), stored.shape, stored.scale.data<float>(), stored.scale.shape());
}

}  // namespace plexus

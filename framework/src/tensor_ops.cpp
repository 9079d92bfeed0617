#include "plexus/tensor_ops.h"

#include <cmath>
#include <cstring>

#include "element_values.h"

namespace plexus {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.device() != b.device())
    throw ShapeError(std::string(op) + ": " + a.describe() + " and " + b.describe() + " differ");
}
}  // namespace

void fill(Context& ctx, Tensor& tensor, double value) {
  if (tensor.device().is_cuda()) return cuda::fill(ctx, tensor, value);
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = tensor.data<T>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i) data[i] = static_cast<T>(value);
  });
}

void set_values(Context& ctx, Tensor& tensor, const std::vector<double>& values) {
  if (static_cast<std::int64_t>(values.size()) != tensor.numel() || values.size() > kMaxSetValues)
    throw ShapeError("set_values: " + std::to_string(values.size()) + " value(s) for " + tensor.describe() +
                     " (at most " + std::to_string(kMaxSetValues) + ")");
  if (tensor.device().is_cuda()) return cuda::set_values(ctx, tensor, values);
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = tensor.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) data[i] = static_cast<T>(values[i]);
  });
}

void add_into(Context& ctx, Tensor& destination, const Tensor& source) {
  check_same(destination, source, "add_into");
  if (destination.device().is_cuda()) return cuda::add_into(ctx, destination, source);
  dispatch_float(destination.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* out = destination.data<T>();
    const T* in = source.data<T>();
    for (std::int64_t i = 0; i < destination.numel(); ++i) out[i] += in[i];
  });
}

bool all_finite(Context& ctx, const Tensor& tensor) {
  if (tensor.device().is_cuda()) return cuda::all_finite(ctx, tensor);
  return dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* data = tensor.data<T>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i)
      if (!std::isfinite(data[i])) return false;
    return true;
  });
}

void convert(Context& ctx, Tensor& destination, const Tensor& source) {
  if (destination.shape() != source.shape() || destination.device() != source.device())
    throw ShapeError("convert: " + source.describe() + " cannot become " + destination.describe());
  if (destination.device().is_cuda()) return cuda::convert(ctx, destination, source);
  dispatch_element(destination.dtype(), [&](auto out_zero) {
    using Out = decltype(out_zero);
    dispatch_element(source.dtype(), [&](auto in_zero) {
      using In = decltype(in_zero);
      Out* out = destination.data<Out>();
      const In* in = source.data<In>();
      // Through double: exact for every f32 and bf16 value, so an f32 or a
      // bf16 source is rounded once.
      for (std::int64_t i = 0; i < destination.numel(); ++i) store_element(out[i], element_value(in[i]));
    });
  });
}

void copy_elements(Context& ctx, Tensor& destination, std::int64_t destination_offset, const Tensor& source,
                   std::int64_t source_offset, std::int64_t count) {
  if (destination.dtype() != source.dtype() || destination.device() != source.device())
    throw ShapeError("copy_elements: " + destination.describe() + " and " + source.describe() + " differ");
  auto inside = [&](const Tensor& tensor, std::int64_t offset) {
    return offset >= 0 && count >= 0 && offset <= tensor.numel() && count <= tensor.numel() - offset;
  };
  if (!inside(destination, destination_offset) || !inside(source, source_offset))
    throw ShapeError("copy_elements: " + std::to_string(count) + " elements from offset " +
                     std::to_string(source_offset) + " of " + source.describe() + " to offset " +
                     std::to_string(destination_offset) + " of " + destination.describe() + " run outside a tensor");
  const std::size_t element = dtype_size(source.dtype());
  char* to = static_cast<char*>(destination.raw_data()) + destination_offset * element;
  const char* from = static_cast<const char*>(source.raw_data()) + source_offset * element;
  if (destination.device().is_cuda()) return cuda::copy_bytes(ctx, to, from, count * element);
  std::memcpy(to, from, count * element);
}

}  // namespace plexus

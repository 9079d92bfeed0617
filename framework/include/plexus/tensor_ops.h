#pragma once
// The few whole-tensor operations the framework itself needs (the graph's
// gradient accumulation, loss seeding). CPU and CUDA.
#include "plexus/context.h"
#include "plexus/tensor.h"
#include "plexus/layer.h"

#include <vector>

namespace plexus {

// Every element of `tensor` set to `value`.
void fill(Context& ctx, Tensor& tensor, double value);
// The elements of a small `tensor` set to `values` (as many as it has, at
// most kMaxSetValues). On CUDA the values travel as a kernel argument
// enqueued on the context's stream: no host-to-device copy, no wait, so a
// training step sets per-step inputs without stalling the GPU.
inline constexpr std::size_t kMaxSetValues = 256;
void set_values(Context& ctx, Tensor& tensor, const std::vector<double>& values);
// destination += source (same shape, dtype and device).
void add_into(Context& ctx, Tensor& destination, const Tensor& source);
// True when every element is finite (no NaN or Inf).
bool all_finite(Context& ctx, const Tensor& tensor);
// destination[destination_offset + i] = source[source_offset + i] for
// i < count: same dtype and device, ranges inside both tensors (else
// ShapeError). On CUDA, enqueued on the context's stream.
void copy_elements(Context& ctx, Tensor& destination, std::int64_t destination_offset, const Tensor& source,
                   std::int64_t source_offset, std::int64_t count);
// destination = source in destination's dtype (f32, f64 or bf16 either way;
// same shape and device, else ShapeError): widening is exact, narrowing
// rounds to nearest even (f64 to bf16 through f32: the two roundings can
// differ from one only where the first lands exactly halfway between two
// bf16 values). A NaN stays a NaN. On CUDA, enqueued on the context's stream.
void convert(Context& ctx, Tensor& destination, const Tensor& source);

namespace cuda {
// CUDA halves of the above, in framework/src/cuda/tensor_ops.cu.
void fill(Context& ctx, Tensor& tensor, double value);
void set_values(Context& ctx, Tensor& tensor, const std::vector<double>& values);
void add_into(Context& ctx, Tensor& destination, const Tensor& source);
bool all_finite(Context& ctx, const Tensor& tensor);
void copy_bytes(Context& ctx, void* destination, const void* source, std::size_t bytes);
void convert(Context& ctx, Tensor& destination, const Tensor& source);
}  // namespace cuda

}  // namespace plexus

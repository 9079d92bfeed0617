#include "plexus/f32_stand_ins.h"

#include "plexus/tensor_ops.h"

namespace plexus {

Tensor& F32StandIns::buffer_like(const Context& ctx, const Tensor& tensor) {
  if (used_ == buffers_.size()) buffers_.emplace_back();
  Tensor& buffer = buffers_[used_++];
  if (!buffer.defined() || buffer.shape() != tensor.shape() || buffer.dtype() != DType::f32 ||
      buffer.device() != tensor.device()) {
    buffer = Tensor();  // the old memory goes back first
    buffer = Tensor(tensor.shape(), DType::f32, tensor.device());
    ctx.note_memory_replaced();
  }
  return buffer;
}

const Tensor& F32StandIns::read(Context& ctx, const Tensor& tensor) {
  if (tensor.dtype() != DType::bf16) return tensor;
  Tensor& buffer = buffer_like(ctx, tensor);
  convert(ctx, buffer, tensor);
  return buffer;
}

Tensor& F32StandIns::write(Context& ctx, Tensor& tensor) {
  if (tensor.dtype() != DType::bf16) return tensor;
  Tensor& buffer = buffer_like(ctx, tensor);
  written_.emplace_back(&buffer, &tensor);
  return buffer;
}

Tensor& F32StandIns::update(Context& ctx, Tensor& tensor) {
  if (tensor.dtype() != DType::bf16) return tensor;
  Tensor& buffer = buffer_like(ctx, tensor);
  convert(ctx, buffer, tensor);
  written_.emplace_back(&buffer, &tensor);
  return buffer;
}

void F32StandIns::finish(Context& ctx) {
  for (auto& [buffer, tensor] : written_) convert(ctx, *tensor, *buffer);
  written_.clear();
}

}  // namespace plexus

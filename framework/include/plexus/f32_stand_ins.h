#pragma once
// f32 stand-ins for bf16 activations. A layer that stores bf16
// (Layer::stores_bf16) but has, for some case, only an f32 kernel (strict
// f32 precision, a size its bf16 kernel does not cover) runs that kernel on
// f32 copies: read() converts a bf16 input into an f32 buffer, write() hands
// out an f32 buffer for a bf16 output, and finish() converts each written
// buffer into its tensor (rounding to nearest even). f32 tensors pass
// through untouched. The results are the f32 kernel's, rounded once on the
// way out; the cost is the conversions' bytes.
//
// The buffers belong to the layer (a member it keeps between calls, like any
// scratch) and are allocated again only when a shape changes, so a warm
// training step allocates nothing and a recorded CUDA graph stays valid.
#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus {

class F32StandIns {
 public:
  explicit F32StandIns(std::deque<Tensor>& buffers) : buffers_(buffers) {}
  F32StandIns(const F32StandIns&) = delete;
  F32StandIns& operator=(const F32StandIns&) = delete;

  // `tensor` itself when it is not bf16; else an f32 copy of it.
  const Tensor& read(Context& ctx, const Tensor& tensor);
  // `tensor` itself when it is not bf16; else an f32 buffer of its shape
  // (undefined contents) that finish() converts into it.
  Tensor& write(Context& ctx, Tensor& tensor);
  // A tensor both read and written (an input gradient that is accumulated into).
  Tensor& update(Context& ctx, Tensor& tensor);
  // Converts every buffer handed out by write() or update() into its tensor.
  void finish(Context& ctx);

 private:
  Tensor& buffer_like(const Context& ctx, const Tensor& tensor);

  std::deque<Tensor>& buffers_;
  std::size_t used_ = 0;
  std::vector<std::pair<Tensor*, Tensor*>> written_;  // (buffer, tensor)
};

}  // namespace plexus

#pragma once
// f32 stand-ins for activations stored in bf16 (LayerTraits::stores_bf16). On
// CUDA each activation tensor of a pass (its image, its output, their
// gradients) may be f32 or bf16, independently; parameters, their
// gradients and every sum stay f32. The kernels that move the most bytes
// read and write bf16 natively (implicit_gemm.h and gdn_cuda.cuh say
// which); every other pass computes on f32 stand-ins made here: a bf16 tensor it reads is
// widened (exactly) into an f32 scratch first, and a bf16 tensor it writes
// is written in f32 to a scratch, then rounded to nearest even into the
// tensor. Either way the pass computes on the same f32 values as with f32
// tensors, so a bf16 result is the f32 result rounded. The buffers are the
// caller's (shared per context, as the convolutions keep them, or a layer's
// own, as GDN's), grown as grown_scratch does: steady state allocates nothing.
#include "convolution/scratch.h"
#include "plexus/context.h"
#include "plexus/tensor.h"
#include "plexus/tensor_ops.h"

namespace plexus::layers {

// Runs `fn` with the tensor's elements as `const float*` (f32) or `const
// BFloat16*` (bf16), for a kernel templated on the element it reads.
template <typename Fn>
decltype(auto) dispatch_activation(const Tensor& tensor, Fn&& fn) {
  if (tensor.dtype() == DType::bf16) return fn(tensor.data<BFloat16>());
  return fn(tensor.data<float>());
}

// The f32 tensor a pass reads in place of `tensor`: `tensor` itself unless
// it is stored in bf16, else its values widened into `buffer`. A pass that
// reads one tensor twice calls this once and keeps the result.
inline Tensor f32_stand_in(Context& ctx, const Tensor& tensor, Tensor& buffer) {
  if (tensor.dtype() != DType::bf16) return tensor;
  Tensor widened = grown_scratch(ctx, buffer, tensor.shape(), DType::f32);
  convert(ctx, widened, tensor);
  return widened;
}

// The f32 tensor a pass writes in place of `destination`: `destination`
// itself unless it is stored in bf16, else a scratch in `buffer` whose
// values store() rounds into `destination` once the pass has written them.
class F32Output {
 public:
  F32Output(Context& ctx, Tensor& destination, Tensor& buffer)
      : destination_(destination),
        f32_(destination.dtype() == DType::bf16 ? grown_scratch(ctx, buffer, destination.shape(), DType::f32)
                                                : destination) {}
  Tensor& f32() { return f32_; }
  void store(Context& ctx) {
    if (destination_.dtype() == DType::bf16) convert(ctx, destination_, f32_);
  }

 private:
  Tensor& destination_;
  Tensor f32_;
};

}  // namespace plexus::layers

// CUDA kernel of CheckerboardMask (math in checkerboard_mask.h): one thread
// per element (grid-stride), the forward and the backward the same copy.
#include "checkerboard_mask/checkerboard_mask.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// to[i] = from[i] where (h + w) mod 2 = parity, else 0; i = ((n C + c) H + h) W + w.
template <typename T>
__global__ void checkerboard_mask_kernel(const T* from, T* to, long long height, long long width, long long parity,
                                         long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long w = i % width, h = (i / width) % height;
    to[i] = (h + w) % 2 == parity ? from[i] : T(0);
  }
}

void launch_mask(Context& ctx, const Tensor& from, Tensor& to, long long parity) {
  const long long total = from.numel();
  if (total == 0) return;
  dispatch_float(from.dtype(), [&](auto zero) {
    using T = decltype(zero);
    checkerboard_mask_kernel<<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
        from.data<T>(), to.data<T>(), from.dim(2), from.dim(3), parity, total);
    cuda::check_launch("checkerboard_mask_kernel", __FILE__, __LINE__);
  });
}

}  // namespace

void CheckerboardMask::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  launch_mask(ctx, *inputs[0], *outputs[0], parity_);
}

void CheckerboardMask::backward_cuda(Context& ctx, const ConstTensors&, const ConstTensors&,
                                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  launch_mask(ctx, *output_grads[0], *input_grads[0], parity_);
}

}  // namespace plexus::layers

// CUDA kernels of Mul (math in mul.h). Element-wise: one thread per element,
// grid-stride so any size fits the capped grid.
#include "mul/mul.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// y = a * b
template <typename T>
__global__ void mul_forward(const T* a, const T* b, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] * b[i];
}

// dL/da = dL/dy * b,  dL/db = dL/dy * a  (either gradient may be null: not wanted)
template <typename T>
__global__ void mul_backward(const T* a, const T* b, const T* dy, T* da, T* db, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    if (da) da[i] = dy[i] * b[i];
    if (db) db[i] = dy[i] * a[i];
  }
}

}  // namespace

void Mul::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  long long n = outputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    mul_forward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), outputs[0]->data<T>(), n);
    cuda::check_launch("mul_forward", __FILE__, __LINE__);
  });
}

void Mul::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  long long n = output_grads[0]->numel();
  if (n == 0 || (!input_grads[0] && !input_grads[1])) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* da = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    T* db = input_grads[1] ? input_grads[1]->data<T>() : nullptr;
    mul_backward<T><<<cuda::blocks_for(n), 256, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), output_grads[0]->data<T>(), da, db, n);
    cuda::check_launch("mul_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

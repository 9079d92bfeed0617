// CUDA kernels of GaussianConditional (math in gaussian_conditional.h).
// Element-wise: one thread per element, grid-stride so any size fits the capped grid.
#include "gaussian_conditional/gaussian_conditional.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;

// Phi(x) = erfc(-x / sqrt 2) / 2: accurate on the lower tail, where p is computed.
template <typename T>
__device__ T standard_normal_cdf(T x) {
  return T(0.5) * erfc(-x * T(0.70710678118654752440));
}

// phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
template <typename T>
__device__ T standard_normal_density(T x) {
  return exp(T(-0.5) * x * x) * T(0.39894228040143267794);
}

// p = max(Phi((1/2 - |v|) / s) - Phi((-1/2 - |v|) / s), likelihood_bound),
// v = y - mean (mean may be null: 0), s = max(scale, scale_bound).
template <typename T>
__global__ void gaussian_conditional_forward(const T* y, const T* scale, const T* mean, T* p, long long n,
                                             T scale_bound, T likelihood_bound) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T a = fabs(mean ? y[i] - mean[i] : y[i]);
    const T s = fmax(scale[i], scale_bound);
    const T likelihood = standard_normal_cdf((T(0.5) - a) / s) - standard_normal_cdf((T(-0.5) - a) / s);
    p[i] = fmax(likelihood, likelihood_bound);
  }
}

// dp/dv = sign(v) (phi(l) - phi(u)) / s, dp/dmean = -dp/dv, dp/ds = (l phi(l) - u phi(u)) / s,
// u = (1/2 - |v|) / s, l = (-1/2 - |v|) / s; both bounds pass the gradient
// where inactive or where it points towards raising the bounded value.
// Null gradient pointers are skipped.
template <typename T>
__global__ void gaussian_conditional_backward(const T* y, const T* scale, const T* mean, const T* output_grad,
                                              T* y_grad, T* scale_grad, T* mean_grad, long long n, T scale_bound,
                                              T likelihood_bound) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const T v = mean ? y[i] - mean[i] : y[i];
    const T a = fabs(v);
    const T s = fmax(scale[i], scale_bound);
    const T u = (T(0.5) - a) / s, l = (T(-0.5) - a) / s;
    const T likelihood = standard_normal_cdf(u) - standard_normal_cdf(l);
    const T g = output_grad[i];
    const T p_grad = likelihood >= likelihood_bound || g < T(0) ? g : T(0);
    const T phi_u = standard_normal_density(u), phi_l = standard_normal_density(l);
    const T sign = v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
    const T v_grad = p_grad * sign * (phi_l - phi_u) / s;
    const T s_grad = p_grad * (l * phi_l - u * phi_u) / s;
    if (y_grad) y_grad[i] = v_grad;
    if (mean_grad) mean_grad[i] = -v_grad;
    if (scale_grad) scale_grad[i] = scale[i] >= scale_bound || s_grad < T(0) ? s_grad : T(0);
  }
}

}  // namespace

void GaussianConditional::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* mean = inputs.size() > 2 ? inputs[2]->data<T>() : nullptr;
    gaussian_conditional_forward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), mean, outputs[0]->data<T>(), n, static_cast<T>(scale_bound_),
        static_cast<T>(likelihood_bound_));
    cuda::check_launch("gaussian_conditional_forward", __FILE__, __LINE__);
  });
}

void GaussianConditional::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                        const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const long long n = inputs[0]->numel();
  if (n == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* mean = inputs.size() > 2 ? inputs[2]->data<T>() : nullptr;
    T* y_grad = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    T* scale_grad = input_grads[1] ? input_grads[1]->data<T>() : nullptr;
    T* mean_grad = input_grads.size() > 2 && input_grads[2] ? input_grads[2]->data<T>() : nullptr;
    if (!y_grad && !scale_grad && !mean_grad) return;
    gaussian_conditional_backward<T><<<cuda::blocks_for(n, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), inputs[1]->data<T>(), mean, output_grads[0]->data<T>(), y_grad, scale_grad, mean_grad, n,
        static_cast<T>(scale_bound_), static_cast<T>(likelihood_bound_));
    cuda::check_launch("gaussian_conditional_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

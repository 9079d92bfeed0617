// CUDA kernels of SimplifiedGDN / SimplifiedIGDN (math in simplified_gdn.h).
// Compiled into the plugin only when plexus_add_plugin() sets
// PLEXUS_PLUGIN_WITH_CUDA=1.
//
// Forward: one thread per pixel computes every n_i and y_i of its pixel.
// Backward: one thread per pixel computes t_i and dx_k; the parameter
// gradients, sums over all pixels of t_i and t_i |x_k|, are matrix products
// and go to cuBLAS (plexus::cuda::gemm), one per image.
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/tensor_ops.h"
#include "simplified_gdn.h"

namespace simplified_gdn {

namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__device__ T magnitude(T value) {
  return value < T(0) ? -value : value;
}

template <typename T>
__device__ T sign(T value) {
  return T((value > T(0)) - (value < T(0)));
}

// v = max(s, bound)^2 - pedestal (the reparametrisation of beta and gamma).
// One thread per element, grid-stride: C or C*C elements.
template <typename T>
__global__ void effective_values(const T* stored, T* value, long long count, T bound, T pedestal) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    T bounded = stored[e] > bound ? stored[e] : bound;
    value[e] = bounded * bounded - pedestal;
  }
}

// ds += 2 max(s, bound) dv where s >= bound or dv < 0 (gradient through the
// bound, see simplified_gdn.h). One thread per element, grid-stride; each
// element is owned by one thread, so += needs no atomics.
template <typename T>
__global__ void accumulate_stored_gradient(const T* stored, const T* value_grad, T* stored_grad, long long count,
                                           T bound) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    T s = stored[e];
    T dv = value_grad[e];
    if (s >= bound || dv < T(0)) stored_grad[e] += T(2) * (s > bound ? s : bound) * dv;
  }
}

// n_i = beta_i + sum_j gamma_ij |x_j|;  y_i = x_i / n_i (GDN) or x_i n_i (IGDN).
// One thread per pixel (image n, position p), grid-stride over N*S pixels:
// the threads of a warp read neighbouring positions of one channel
// (coalesced), and all read the same gamma_ij (a broadcast from cache).
template <typename T>
__global__ void simplified_gdn_forward(const T* x, const T* beta, const T* gamma, T* y, long long total_pixels,
                                       int channels, long long pixels, bool inverse) {
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total_pixels;
       q += (long long)gridDim.x * blockDim.x) {
    const long long offset = (q / pixels) * channels * pixels + q % pixels;
    const T* x_pixel = x + offset;
    T* y_pixel = y + offset;
    for (int i = 0; i < channels; ++i) {
      T norm = beta[i];
      for (int j = 0; j < channels; ++j) norm += gamma[i * channels + j] * magnitude(x_pixel[j * pixels]);
      T x_i = x_pixel[i * pixels];
      y_pixel[i * pixels] = inverse ? x_i * norm : x_i / norm;
    }
  }
}

// Per pixel: t_i = dy_i x_i c_i  (c_i = -1/n_i^2 for GDN, 1 for IGDN), written
// to t with |x_i| to magnitudes (the inputs of the parameter-gradient GEMMs);
// then, when dx is wanted,
//   dx_k = dy_k / n_k (GDN) or dy_k n_k (IGDN) + sign(x_k) sum_i gamma_ik t_i.
// One thread per pixel, grid-stride over N*S pixels, as in the forward. A
// thread reads back only the t_i of its own pixel, so there are no races.
template <typename T>
__global__ void simplified_gdn_backward(const T* x, const T* dy, const T* beta, const T* gamma, T* t, T* magnitudes,
                                        T* dx, long long total_pixels, int channels, long long pixels, bool inverse) {
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total_pixels;
       q += (long long)gridDim.x * blockDim.x) {
    const long long offset = (q / pixels) * channels * pixels + q % pixels;
    const T* x_pixel = x + offset;
    const T* dy_pixel = dy + offset;
    T* t_pixel = t + offset;
    for (int i = 0; i < channels; ++i) {
      T norm = beta[i];
      for (int j = 0; j < channels; ++j) norm += gamma[i * channels + j] * magnitude(x_pixel[j * pixels]);
      T x_i = x_pixel[i * pixels];
      T dy_i = dy_pixel[i * pixels];
      t_pixel[i * pixels] = inverse ? dy_i * x_i : -dy_i * x_i / (norm * norm);
      magnitudes[offset + i * pixels] = magnitude(x_i);
      if (dx) dx[offset + i * pixels] = inverse ? dy_i * norm : dy_i / norm;
    }
    if (!dx) continue;
    for (int k = 0; k < channels; ++k) {
      T mixed = T(0);
      for (int i = 0; i < channels; ++i) mixed += gamma[i * channels + k] * t_pixel[i * pixels];
      dx[offset + k * pixels] += sign(x_pixel[k * pixels]) * mixed;
    }
  }
}

template <typename T>
void launch_effective_values(Context& ctx, const plexus::Tensor& stored, plexus::Tensor& value, double bound,
                             double pedestal) {
  long long count = stored.numel();
  effective_values<T><<<plexus::cuda::blocks_for(count, kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
      stored.data<T>(), value.data<T>(), count, T(bound), T(pedestal));
  plexus::cuda::check_launch("effective_values", __FILE__, __LINE__);
}

template <typename T>
void launch_accumulate_stored_gradient(Context& ctx, plexus::Parameter& parameter, const plexus::Tensor& value_grad,
                                       double bound) {
  long long count = parameter.value.numel();
  accumulate_stored_gradient<T><<<plexus::cuda::blocks_for(count, kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
      parameter.value.data<T>(), value_grad.data<T>(), parameter.grad.data<T>(), count, T(bound));
  plexus::cuda::check_launch("accumulate_stored_gradient", __FILE__, __LINE__);
}

}  // namespace

void SimplifiedGDN::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const plexus::Tensor& input = *inputs[0];
  if (input.numel() == 0) return;
  const long long images = input.dim(0);
  const int channels = static_cast<int>(input.dim(1));
  const long long pixels = input.numel() / (images * channels);  // per image and channel
  const long long total_pixels = images * pixels;
  plexus::dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    plexus::Tensor beta({channels}, input.dtype(), ctx.device());
    plexus::Tensor gamma({channels, channels}, input.dtype(), ctx.device());
    launch_effective_values<T>(ctx, parameter("beta").value, beta, reparam_.beta_bound, reparam_.pedestal);
    launch_effective_values<T>(ctx, parameter("gamma").value, gamma, reparam_.gamma_bound, reparam_.pedestal);
    simplified_gdn_forward<T>
        <<<plexus::cuda::blocks_for(total_pixels, kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
            input.data<T>(), beta.data<T>(), gamma.data<T>(), outputs[0]->data<T>(), total_pixels, channels, pixels,
            inverse_);
    plexus::cuda::check_launch("simplified_gdn_forward", __FILE__, __LINE__);
  });
}

void SimplifiedGDN::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                  const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const plexus::Tensor& input = *inputs[0];
  if (input.numel() == 0) return;
  const long long images = input.dim(0);
  const int channels = static_cast<int>(input.dim(1));
  const long long pixels = input.numel() / (images * channels);  // per image and channel
  const long long total_pixels = images * pixels;
  plexus::Parameter& beta_parameter = parameter("beta");
  plexus::Parameter& gamma_parameter = parameter("gamma");
  plexus::dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const plexus::DType dtype = input.dtype();
    const plexus::Device device = ctx.device();
    plexus::Tensor beta({channels}, dtype, device);
    plexus::Tensor gamma({channels, channels}, dtype, device);
    launch_effective_values<T>(ctx, beta_parameter.value, beta, reparam_.beta_bound, reparam_.pedestal);
    launch_effective_values<T>(ctx, gamma_parameter.value, gamma, reparam_.gamma_bound, reparam_.pedestal);

    plexus::Tensor t(input.shape(), dtype, device);
    plexus::Tensor magnitudes(input.shape(), dtype, device);
    T* dx = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    simplified_gdn_backward<T>
        <<<plexus::cuda::blocks_for(total_pixels, kThreads), kThreads, 0, plexus::cuda::stream(ctx)>>>(
            input.data<T>(), output_grads[0]->data<T>(), beta.data<T>(), gamma.data<T>(), t.data<T>(),
            magnitudes.data<T>(), dx, total_pixels, channels, pixels, inverse_);
    plexus::cuda::check_launch("simplified_gdn_backward", __FILE__, __LINE__);

    // Per image n, with T_n = t[n] and A_n = |x[n]| as row-major [C, S]:
    //   dgamma += T_n A_n^T   ([C, C]),   dbeta += T_n 1   ([C, 1]).
    // The accumulators start at zero (new tensors are zero-filled).
    plexus::Tensor beta_grad({channels, 1}, dtype, device);
    plexus::Tensor gamma_grad({channels, channels}, dtype, device);
    plexus::Tensor ones({pixels, 1}, dtype, device);
    plexus::fill(ctx, ones, 1.0);
    const int k = static_cast<int>(pixels);
    for (long long n = 0; n < images; ++n) {
      const T* t_image = t.data<T>() + n * channels * pixels;
      const T* magnitude_image = magnitudes.data<T>() + n * channels * pixels;
      plexus::cuda::gemm<T>(ctx, false, true, channels, channels, k, T(1), t_image, magnitude_image, T(1),
                            gamma_grad.data<T>());
      plexus::cuda::gemm<T>(ctx, false, false, channels, 1, k, T(1), t_image, ones.data<T>(), T(1),
                            beta_grad.data<T>());
    }
    launch_accumulate_stored_gradient<T>(ctx, beta_parameter, beta_grad, reparam_.beta_bound);
    launch_accumulate_stored_gradient<T>(ctx, gamma_parameter, gamma_grad, reparam_.gamma_bound);
  });
}

}  // namespace simplified_gdn

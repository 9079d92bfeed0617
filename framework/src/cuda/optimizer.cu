// CUDA optimiser updates (formulas in plexus/optimizer.h). Element-wise: one
// thread per parameter element, grid-stride so any size fits the capped grid.
#include "../optimizer_kernels.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace plexus::cuda {

namespace {

__device__ inline float sqrt_of(float x) { return sqrtf(x); }
__device__ inline double sqrt_of(double x) { return sqrt(x); }

// SGD with momentum: v = mu v + g;  w -= lr v
template <typename T>
__global__ void sgd_kernel(T* w, const T* g, T* velocity, long long n, T learning_rate, T momentum) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T v = momentum * velocity[i] + g[i];
    velocity[i] = v;
    w[i] -= learning_rate * v;
  }
}

// Adam (Kingma & Ba 2015, Algorithm 1):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
template <typename T>
__global__ void adam_kernel(T* w, const T* g, T* m, T* v, long long n, T learning_rate, T beta1, T beta2,
                            T epsilon, T correction1, T correction2) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T gradient = g[i];
    T first = beta1 * m[i] + (T(1) - beta1) * gradient;
    T second = beta2 * v[i] + (T(1) - beta2) * gradient * gradient;
    m[i] = first;
    v[i] = second;
    w[i] -= learning_rate * (first / correction1) / (sqrt_of(second / correction2) + epsilon);
  }
}

}  // namespace

void sgd_update(Context& ctx, Tensor& weight, const Tensor& grad, Tensor& velocity, double learning_rate,
                double momentum) {
  long long n = weight.numel();
  if (n == 0) return;
  dispatch_float(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_kernel<T><<<blocks_for(n), 256, 0, stream(ctx)>>>(weight.data<T>(), grad.data<T>(), velocity.data<T>(), n,
                                                          static_cast<T>(learning_rate), static_cast<T>(momentum));
    check_launch("sgd_kernel", __FILE__, __LINE__);
  });
}

void adam_update(Context& ctx, Tensor& weight, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate,
                 double beta1, double beta2, double epsilon, double correction1, double correction2) {
  long long n = weight.numel();
  if (n == 0) return;
  dispatch_float(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    adam_kernel<T><<<blocks_for(n), 256, 0, stream(ctx)>>>(
        weight.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), n, static_cast<T>(learning_rate),
        static_cast<T>(beta1), static_cast<T>(beta2), static_cast<T>(epsilon), static_cast<T>(correction1),
        static_cast<T>(correction2));
    check_launch("adam_kernel", __FILE__, __LINE__);
  });
}

}  // namespace plexus::cuda

// CUDA optimiser updates (formulas in plexus/optimizer.h). Element-wise: one
// thread per parameter element, grid-stride so any size fits the capped grid;
// Adam covers every parameter in one launch (per dtype) instead of one each.
#include <algorithm>
#include <vector>

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
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T v = momentum * velocity[i] + g[i];
    velocity[i] = v;
    w[i] -= learning_rate * v;
  }
}

// Adam (Kingma & Ba 2015, Algorithm 1) over a table of tensors laid end to
// end: element i belongs to the last tensor whose `begin` is <= i.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// scalars = {lr, 1 - b1^t, 1 - b2^t} in device memory, converted to T as
// the per-tensor update did, so results are unchanged.
template <typename T>
struct AdamSlice {
  T* w;
  const T* g;
  T* m;
  T* v;
  long long begin;
};

template <typename T>
__global__ void fused_adam_kernel(const AdamSlice<T>* slices, int count, long long total, const double* scalars,
                                  T beta1, T beta2, T epsilon) {
  const T learning_rate = static_cast<T>(scalars[0]);
  const T correction1 = static_cast<T>(scalars[1]);
  const T correction2 = static_cast<T>(scalars[2]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    int low = 0, high = count - 1;  // binary search: the slice holding i
    while (low < high) {
      int mid = (low + high + 1) / 2;
      if (slices[mid].begin <= i) low = mid;
      else high = mid - 1;
    }
    const AdamSlice<T> s = slices[low];
    const long long j = i - s.begin;
    T gradient = s.g[j];
    T first = beta1 * s.m[j] + (T(1) - beta1) * gradient;
    T second = beta2 * s.v[j] + (T(1) - beta2) * gradient * gradient;
    s.m[j] = first;
    s.v[j] = second;
    s.w[j] -= learning_rate * (first / correction1) / (sqrt_of(second / correction2) + epsilon);
  }
}

// One thread: three stores, ordered on the stream before the update.
__global__ void write_adam_scalars(double* scalars, double learning_rate, double correction1, double correction2) {
  scalars[0] = learning_rate;
  scalars[1] = correction1;
  scalars[2] = correction2;
}

// The device copy of one dtype's slice table, grown (never shrunk) as needed.
template <typename T>
struct SliceTable {
  std::vector<AdamSlice<T>> host;
  AdamSlice<T>* device = nullptr;
  std::size_t capacity = 0;
  long long total = 0;
  bool uploaded = false;

  void upload(std::vector<AdamSlice<T>> slices, long long elements) {
    const bool same = uploaded && slices.size() == host.size() &&
                      std::equal(slices.begin(), slices.end(), host.begin(), [](const auto& a, const auto& b) {
                        return a.w == b.w && a.g == b.g && a.m == b.m && a.v == b.v && a.begin == b.begin;
                      });
    if (same) return;
    if (slices.size() > capacity) {
      if (device) check_cuda(cudaFree(device), "cudaFree", __FILE__, __LINE__);
      device = nullptr;
      check_cuda(cudaMalloc(&device, slices.size() * sizeof(AdamSlice<T>)), "cudaMalloc", __FILE__, __LINE__);
      capacity = slices.size();
    }
    if (!slices.empty())
      check_cuda(cudaMemcpy(device, slices.data(), slices.size() * sizeof(AdamSlice<T>), cudaMemcpyHostToDevice),
                 "cudaMemcpy", __FILE__, __LINE__);
    host = std::move(slices);
    total = elements;
    uploaded = true;
  }
  void release() noexcept {
    if (device) cudaFree(device);
    device = nullptr;
  }
};

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

struct AdamDevice {
  int device = 0;
  double* scalars = nullptr;  // {lr, 1 - b1^t, 1 - b2^t}
  SliceTable<float> f32;
  SliceTable<double> f64;
};

AdamDevice* create_adam_device() { return new AdamDevice; }

void destroy_adam_device(AdamDevice* device) noexcept {
  if (!device) return;
  cudaSetDevice(device->device);
  cudaDeviceSynchronize();  // no queued update may still read the tables
  if (device->scalars) cudaFree(device->scalars);
  device->f32.release();
  device->f64.release();
  delete device;
}

void adam_prepare(Context& ctx, AdamDevice& device, const std::vector<AdamTensors>& tensors, double learning_rate,
                  double correction1, double correction2) {
  if (!device.scalars) {
    device.device = resources(ctx).device;
    check_cuda(cudaMalloc(&device.scalars, 3 * sizeof(double)), "cudaMalloc", __FILE__, __LINE__);
  }
  std::vector<AdamSlice<float>> f32;
  std::vector<AdamSlice<double>> f64;
  long long f32_total = 0, f64_total = 0;
  for (const AdamTensors& t : tensors) {
    const long long n = t.weight->numel();
    if (n == 0) continue;
    if (t.weight->dtype() == DType::f32) {
      f32.push_back(
          {t.weight->data<float>(), t.grad->data<float>(), t.m->data<float>(), t.v->data<float>(), f32_total});
      f32_total += n;
    } else {
      f64.push_back(
          {t.weight->data<double>(), t.grad->data<double>(), t.m->data<double>(), t.v->data<double>(), f64_total});
      f64_total += n;
    }
  }
  device.f32.upload(std::move(f32), f32_total);
  device.f64.upload(std::move(f64), f64_total);
  write_adam_scalars<<<1, 1, 0, stream(ctx)>>>(device.scalars, learning_rate, correction1, correction2);
  check_launch("write_adam_scalars", __FILE__, __LINE__);
}

namespace {
template <typename T>
void launch_fused_adam(Context& ctx, const SliceTable<T>& table, const double* scalars, double beta1, double beta2,
                       double epsilon) {
  if (table.total == 0) return;
  fused_adam_kernel<T><<<blocks_for(table.total), 256, 0, stream(ctx)>>>(
      table.device, static_cast<int>(table.host.size()), table.total, scalars, static_cast<T>(beta1),
      static_cast<T>(beta2), static_cast<T>(epsilon));
  check_launch("fused_adam_kernel", __FILE__, __LINE__);
}
}  // namespace

void adam_apply(Context& ctx, AdamDevice& device, double beta1, double beta2, double epsilon) {
  launch_fused_adam(ctx, device.f32, device.scalars, beta1, beta2, epsilon);
  launch_fused_adam(ctx, device.f64, device.scalars, beta1, beta2, epsilon);
}

}  // namespace plexus::cuda

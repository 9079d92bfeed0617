// CUDA halves of plexus/tensor_ops.h. Element-wise, grid-stride loops.
#include <cuda_bf16.h>

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/tensor_ops.h"

namespace plexus::cuda {

namespace {

template <typename T>
__global__ void fill_kernel(T* data, long long n, T value) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    data[i] = value;
}

struct SmallValues {
  double values[kMaxSetValues];
};

template <typename T>
__global__ void set_values_kernel(T* data, int n, SmallValues small) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = static_cast<T>(small.values[i]);
}

template <typename T>
__global__ void add_into_kernel(T* destination, const T* source, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    destination[i] += source[i];
}

// Sets *flag to 1 when any element is NaN or Inf.
template <typename T>
__global__ void non_finite_kernel(const T* data, long long n, int* flag) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    if (!isfinite(data[i])) *flag = 1;
}

// Element conversions: f32 and bf16 widen to float, f64 to double; narrowing
// rounds to nearest even (__float2bfloat16_rn for bf16; f64 to bf16 through
// f32, as on the CPU).
__device__ float widened(float value) { return value; }
__device__ double widened(double value) { return value; }
__device__ float widened(BFloat16 value) { return __uint_as_float(static_cast<unsigned>(value.bits) << 16); }

template <typename Wide>
__device__ void narrow_into(float& out, Wide value) {
  out = static_cast<float>(value);
}
template <typename Wide>
__device__ void narrow_into(double& out, Wide value) {
  out = static_cast<double>(value);
}
template <typename Wide>
__device__ void narrow_into(BFloat16& out, Wide value) {
  out.bits = __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(value)));
}

template <typename Out, typename In>
__global__ void convert_kernel(Out* out, const In* in, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    narrow_into(out[i], widened(in[i]));
}

}  // namespace

void convert(Context& ctx, Tensor& destination, const Tensor& source) {
  const long long n = destination.numel();
  if (n == 0) return;
  dispatch_element(destination.dtype(), [&](auto out_zero) {
    using Out = decltype(out_zero);
    dispatch_element(source.dtype(), [&](auto in_zero) {
      using In = decltype(in_zero);
      convert_kernel<Out, In><<<blocks_for(n), 256, 0, stream(ctx)>>>(destination.data<Out>(), source.data<In>(), n);
      check_launch("convert_kernel", __FILE__, __LINE__);
    });
  });
}

void fill(Context& ctx, Tensor& tensor, double value) {
  long long n = tensor.numel();
  if (n == 0) return;
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    fill_kernel<T><<<blocks_for(n), 256, 0, stream(ctx)>>>(tensor.data<T>(), n, static_cast<T>(value));
    check_launch("fill_kernel", __FILE__, __LINE__);
  });
}

void set_values(Context& ctx, Tensor& tensor, const std::vector<double>& values) {
  const int n = static_cast<int>(values.size());
  if (n == 0) return;
  SmallValues small{};
  for (int i = 0; i < n; ++i) small.values[i] = values[static_cast<std::size_t>(i)];
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    set_values_kernel<T><<<1, static_cast<unsigned>(kMaxSetValues), 0, stream(ctx)>>>(tensor.data<T>(), n, small);
    check_launch("set_values_kernel", __FILE__, __LINE__);
  });
}

void add_into(Context& ctx, Tensor& destination, const Tensor& source) {
  long long n = destination.numel();
  if (n == 0) return;
  dispatch_float(destination.dtype(), [&](auto zero) {
    using T = decltype(zero);
    add_into_kernel<T><<<blocks_for(n), 256, 0, stream(ctx)>>>(destination.data<T>(), source.data<T>(), n);
    check_launch("add_into_kernel", __FILE__, __LINE__);
  });
}

bool all_finite(Context& ctx, const Tensor& tensor) {
  long long n = tensor.numel();
  if (n == 0) return true;
  Tensor flag_tensor({1}, DType::f32, tensor.device());  // 4 bytes, zeroed: an int flag
  int* flag = static_cast<int*>(flag_tensor.raw_data());
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    non_finite_kernel<T><<<blocks_for(n), 256, 0, stream(ctx)>>>(tensor.data<T>(), n, flag);
    check_launch("non_finite_kernel", __FILE__, __LINE__);
  });
  int host_flag = 0;
  check_cuda(cudaMemcpyAsync(&host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost, stream(ctx)), "cudaMemcpyAsync",
             __FILE__, __LINE__);
  check_cuda(cudaStreamSynchronize(stream(ctx)), "cudaStreamSynchronize", __FILE__, __LINE__);
  return host_flag == 0;
}

void copy_bytes(Context& ctx, void* destination, const void* source, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream(ctx)), "cudaMemcpyAsync",
             __FILE__, __LINE__);
}

}  // namespace plexus::cuda

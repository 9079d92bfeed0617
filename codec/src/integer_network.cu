// codec::scale_indices on CUDA (plexus/codec/integer_network.h): the same
// integer formulas as the CPU path in framework/src/codec/integer_network.cpp,
// so the indices are bit-identical (integer sums are exact in any order).
#include <cstdint>
#include <memory>
#include <vector>

#include "integer_network_kernels.h"
#include "plexus/cuda/cuda_check.h"

namespace plexus::codec {

namespace {

using cuda::check_cuda;

// Device memory for `count` values of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) check_cuda(cudaMalloc(&data_, count_ * sizeof(T)), "cudaMalloc", __FILE__, __LINE__);
  }
  explicit DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(values.size()) {
    if (count_ > 0)
      check_cuda(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy", __FILE__, __LINE__);
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // nothing to report from a destructor
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> values(count_);
    if (count_ > 0)
      check_cuda(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy", __FILE__, __LINE__);
    return values;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

struct LayerView {
  const std::int32_t* weight;
  const std::int64_t* bias;
  const std::int64_t* multiplier;  // null for the last layer
  const std::int32_t* shift;
  int transposed, in_channels, out_channels, kernel, stride, padding;
  std::int64_t in_height, in_width, out_height, out_width;
};

// acc[o, y, x] = B[o] + sum_{c, i, j} V q[c, y(i), x(j)]: the gather of
// accumulate() in integer_network.cpp, tap for tap.
__device__ std::int64_t accumulate(const LayerView& l, const std::int32_t* q, std::int64_t o, std::int64_t y,
                                   std::int64_t x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding, channels = l.in_channels, outs = l.out_channels;
  std::int64_t acc = l.bias[o];
  for (std::int64_t i = 0; i < k; ++i) {
    std::int64_t a;
    if (l.transposed) {
      const std::int64_t t = y + p - i;
      if (t < 0 || t % s != 0) continue;
      a = t / s;
    } else {
      a = y * s - p + i;
    }
    if (a < 0 || a >= l.in_height) continue;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t b;
      if (l.transposed) {
        const std::int64_t t = x + p - j;
        if (t < 0 || t % s != 0) continue;
        b = t / s;
      } else {
        b = x * s - p + j;
      }
      if (b < 0 || b >= l.in_width) continue;
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t v = l.transposed ? l.weight[((c * outs + o) * k + i) * k + j]
                                            : l.weight[((o * channels + c) * k + i) * k + j];
        acc += v * q[(c * l.in_height + a) * l.in_width + b];
      }
    }
  }
  return acc;
}

// q[n] = clamp(input[n], -32767, 32767).
__global__ void clamp_input_kernel(std::int32_t* q, std::int64_t count) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n < count) q[n] = max(-kIntegerActivationMax, min(q[n], kIntegerActivationMax));
}

// Hidden layer: q'[o] = 0 if acc <= 0, else min((acc M + 2^(S-1)) >> S, 32767).
__global__ void hidden_layer_kernel(LayerView l, const std::int32_t* q, std::int32_t* next) {
  const std::int64_t plane = l.out_height * l.out_width;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= l.out_channels * plane) return;
  const std::int64_t o = n / plane, y = n % plane / l.out_width, x = n % l.out_width;
  const std::int64_t acc = accumulate(l, q, o, y, x);
  const std::int32_t shift = l.shift[o];
  const std::int64_t rounding = shift > 0 ? std::int64_t(1) << (shift - 1) : 0;
  next[n] = acc <= 0 ? 0
                     : static_cast<std::int32_t>(min((acc * l.multiplier[o] + rounding) >> shift,
                                                     static_cast<std::int64_t>(kIntegerActivationMax)));
}

// Last layer: index = #{i < count : acc > T[o, i]}.
__global__ void index_layer_kernel(LayerView l, const std::int32_t* q, const std::int64_t* thresholds, int count,
                                   std::int32_t* indices) {
  const std::int64_t plane = l.out_height * l.out_width;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= l.out_channels * plane) return;
  const std::int64_t o = n / plane, y = n % plane / l.out_width, x = n % l.out_width;
  const std::int64_t acc = accumulate(l, q, o, y, x);
  const std::int64_t* row = thresholds + o * count;
  std::int32_t index = 0;
  for (int i = 0; i < count; ++i) index += acc > row[i];
  indices[n] = index;
}

// One thread per output element: the network is small and memory-light, and
// a thread that owns its whole sum keeps the kernel a line-by-line copy of the CPU's.
constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

// Restores the calling thread's current device on scope exit.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", __FILE__, __LINE__);
    check_cuda(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

std::vector<std::int32_t> scale_indices_cuda(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                             std::int64_t height, std::int64_t width, int device) {
  DeviceScope scope(device);
  auto q = std::make_unique<DeviceBuffer<std::int32_t>>(input);
  clamp_input_kernel<<<blocks_for(static_cast<std::int64_t>(input.size())), kThreads>>>(
      q->get(), static_cast<std::int64_t>(input.size()));
  cuda::check_launch("clamp_input_kernel", __FILE__, __LINE__);
  const DeviceBuffer<std::int64_t> thresholds(network.thresholds);
  for (std::size_t index = 0; index < network.layers.size(); ++index) {
    const IntegerConvLayer& layer = network.layers[index];
    const bool last = index + 1 == network.layers.size();
    const DeviceBuffer<std::int32_t> weight(layer.weight);
    const DeviceBuffer<std::int64_t> bias(layer.bias), multiplier(layer.multiplier);
    const DeviceBuffer<std::int32_t> shift(layer.shift);
    LayerView view{weight.get(), bias.get(), multiplier.get(), shift.get(),
                   layer.transposed ? 1 : 0, layer.in_channels, layer.out_channels, layer.kernel,
                   layer.stride, layer.padding, height, width, layer.output_side(height), layer.output_side(width)};
    const std::int64_t outputs = view.out_channels * view.out_height * view.out_width;
    auto next = std::make_unique<DeviceBuffer<std::int32_t>>(static_cast<std::size_t>(outputs));
    if (last) {
      index_layer_kernel<<<blocks_for(outputs), kThreads>>>(view, q->get(), thresholds.get(), network.levels - 1,
                                                            next->get());
      cuda::check_launch("index_layer_kernel", __FILE__, __LINE__);
    } else {
      hidden_layer_kernel<<<blocks_for(outputs), kThreads>>>(view, q->get(), next->get());
      cuda::check_launch("hidden_layer_kernel", __FILE__, __LINE__);
    }
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    q = std::move(next);
    height = view.out_height;
    width = view.out_width;
  }
  return q->to_host();
}

}  // namespace plexus::codec

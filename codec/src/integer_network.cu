// codec::run_network on CUDA (plexus/codec/integer_network.h): the element
// formulas are integer_arithmetic.h's, shared with the CPU path, so the
// outputs are bit-identical (integer sums are exact in any order).
#include <algorithm>
#include <cstdint>
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
      check_cuda(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy",
                 __FILE__, __LINE__);
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // nothing to report from a destructor
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) { other.data_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::vector<T> to_host() const {
    std::vector<T> values(count_);
    if (count_ > 0)
      check_cuda(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy",
                 __FILE__, __LINE__);
    return values;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

// One thread per output element: the network is small and memory-light,
// and a thread that owns its whole sum keeps the kernel the CPU's formula.
constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

__global__ void convolution_kernel(arithmetic::ConvView view, const std::int64_t* q, std::int64_t out_height,
                                   std::int64_t out_width, std::int64_t* acc) {
  const std::int64_t plane = out_height * out_width;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= view.out_channels * plane) return;
  acc[n] = arithmetic::accumulate(view, q, n / plane, n % plane / out_width, n % out_width);
}

__global__ void rescale_kernel(const std::int64_t* acc, const std::int64_t* multiplier,
                               const std::int64_t* negative_multiplier, const std::int32_t* shift,
                               std::int64_t plane, std::int64_t count, std::int64_t* q) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  const std::int64_t c = n / plane;
  q[n] = arithmetic::rescale(acc[n], multiplier[c], negative_multiplier[c], shift[c]);
}

__global__ void index_kernel(const std::int64_t* scales, const std::int64_t* thresholds, std::int32_t levels_minus_one,
                             std::int64_t plane, std::int64_t count, std::int32_t* indices) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  indices[n] = arithmetic::table_index(scales[n], thresholds + n / plane * levels_minus_one, levels_minus_one);
}

__global__ void mean_kernel(const std::int64_t* values, const std::int64_t* multiplier, const std::int32_t* shift,
                            std::int64_t plane, std::int64_t count, std::int64_t* means) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  const std::int64_t c = n / plane;
  means[n] = arithmetic::fixed_mean(values[n], multiplier[c], shift[c]);
}

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

void copy_on_device(std::int64_t* to, const std::int64_t* from, std::size_t count) {
  if (count > 0)
    check_cuda(cudaMemcpy(to, from, count * sizeof(std::int64_t), cudaMemcpyDeviceToDevice), "cudaMemcpy", __FILE__,
               __LINE__);
}

// Node `node` of the network, writing `out` from the tensors before it.
void run_node(const IntegerNode& node, const std::vector<DeviceBuffer<std::int64_t>>& tensors,
              const std::vector<std::pair<std::int64_t, std::int64_t>>& sides, std::int64_t out_height,
              std::int64_t out_width, DeviceBuffer<std::int64_t>& out) {
  const std::int64_t plane = out_height * out_width;
  const DeviceBuffer<std::int64_t>& x = tensors[static_cast<std::size_t>(node.inputs[0])];
  const std::int64_t count = static_cast<std::int64_t>(out.size());
  switch (node.op) {
    case IntegerOp::convolution: {
      const DeviceBuffer<std::int32_t> weight(node.conv.weight);
      const DeviceBuffer<std::int64_t> bias(node.conv.bias);
      const auto [in_height, in_width] = sides[static_cast<std::size_t>(node.inputs[0])];
      convolution_kernel<<<blocks_for(count), kThreads>>>(
          conv_view(node.conv, weight.get(), bias.get(), in_height, in_width), x.get(), out_height, out_width,
          out.get());
      cuda::check_launch("convolution_kernel", __FILE__, __LINE__);
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);  // before weight is freed
      break;
    }
    case IntegerOp::rescale: {
      const DeviceBuffer<std::int64_t> multiplier(node.multiplier), negative(node.negative_multiplier);
      const DeviceBuffer<std::int32_t> shift(node.shift);
      rescale_kernel<<<blocks_for(count), kThreads>>>(x.get(), multiplier.get(), negative.get(), shift.get(), plane,
                                                      count, out.get());
      cuda::check_launch("rescale_kernel", __FILE__, __LINE__);
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
      break;
    }
    case IntegerOp::concat: {
      std::size_t offset = 0;
      for (std::int32_t input : node.inputs) {
        const DeviceBuffer<std::int64_t>& part = tensors[static_cast<std::size_t>(input)];
        copy_on_device(out.get() + offset, part.get(), part.size());
        offset += part.size();
      }
      break;
    }
    case IntegerOp::slice:
      copy_on_device(out.get(), x.get() + node.begin * plane, out.size());
      break;
  }
}

}  // namespace

IntegerOutputs run_network_cuda(const IntegerNetwork& network, const std::vector<std::int32_t>& input,
                                std::int64_t height, std::int64_t width, int device) {
  DeviceScope scope(device);
  const auto sides = tensor_sides(network, height, width);
  const std::vector<std::int32_t> channels = network.channels();
  const std::int32_t last = std::max(network.scales, network.means);
  std::vector<DeviceBuffer<std::int64_t>> tensors;
  tensors.emplace_back(clamped_input(input));
  for (std::int32_t t = 1; t <= last; ++t) {
    const auto [h, w] = sides[static_cast<std::size_t>(t)];
    DeviceBuffer<std::int64_t> out(static_cast<std::size_t>(channels[static_cast<std::size_t>(t)] * h * w));
    run_node(network.nodes[static_cast<std::size_t>(t - 1)], tensors, sides, h, w, out);
    tensors.push_back(std::move(out));
  }
  IntegerOutputs outputs;
  outputs.shape = network.output_shape(height, width);
  const std::int64_t plane = outputs.shape[1] * outputs.shape[2];
  const DeviceBuffer<std::int64_t>& scales = tensors[static_cast<std::size_t>(network.scales)];
  const std::int64_t count = static_cast<std::int64_t>(scales.size());
  const DeviceBuffer<std::int64_t> thresholds(network.thresholds);
  DeviceBuffer<std::int32_t> indices(scales.size());
  index_kernel<<<blocks_for(count), kThreads>>>(scales.get(), thresholds.get(), network.levels - 1, plane, count,
                                                indices.get());
  cuda::check_launch("index_kernel", __FILE__, __LINE__);
  outputs.indices = indices.to_host();
  if (network.has_means()) {
    const DeviceBuffer<std::int64_t> multiplier(network.mean_multiplier);
    const DeviceBuffer<std::int32_t> shift(network.mean_shift);
    DeviceBuffer<std::int64_t> means(scales.size());
    mean_kernel<<<blocks_for(count), kThreads>>>(tensors[static_cast<std::size_t>(network.means)].get(),
                                                 multiplier.get(), shift.get(), plane, count, means.get());
    cuda::check_launch("mean_kernel", __FILE__, __LINE__);
    outputs.means = means.to_host();
  }
  return outputs;
}

}  // namespace plexus::codec

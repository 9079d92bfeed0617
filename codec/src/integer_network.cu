// The integer network's CUDA backends (IntegerNetworkRunner::Backend, network_structure.h,
// and AutoregressiveRunner::Backend, autoregressive_coding.h): the
// element formulas are integer_arithmetic.h's, shared with the CPU backends,
// and the convolutions are f64 GEMMs of integers (cuBLAS, pedantic math: no
// reduced-precision or emulated paths) or f64 sums of integers, exact in any
// order, so the outputs are bit-identical to the CPU's.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "autoregressive_coding.h"
#include "integer_arithmetic.h"
#include "network_structure.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"

namespace plexus::codec {

namespace {

using cuda::check_cublas;
using cuda::check_cuda;

// Device memory for `count` values of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) check_cuda(cudaMalloc(&data_, count_ * sizeof(T)), "cudaMalloc", __FILE__, __LINE__);
  }
  explicit DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(values.size()) {
    if (count_ > 0)
      check_cuda(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy", __FILE__,
                 __LINE__);
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // nothing to report from a destructor
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  // At least `count` values; the contents are lost when it grows.
  void reserve(std::size_t count) {
    if (count > count_) *this = DeviceBuffer(count);
  }
  std::vector<T> to_host(std::size_t offset, std::size_t count) const {
    std::vector<T> values(count);
    if (count > 0)
      check_cuda(cudaMemcpy(values.data(), data_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy",
                 __FILE__, __LINE__);
    return values;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

constexpr int kThreads = 256;
// The im2col block of one GEMM holds at most this many values (256 MB).
constexpr std::int64_t kColumnBlockValues = std::int64_t(1) << 25;

unsigned blocks_for(std::int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

// cols[r, p] (row-major [rows, count]) for output positions first .. first + count.
__global__ void im2col_kernel(arithmetic::ConvGeometry geometry, const std::int64_t* q, std::int64_t rows,
                              std::int64_t first, std::int64_t count, double* cols) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= rows * count) return;
  cols[n] = arithmetic::im2col_value(geometry, q, n / count, first + n % count);
}

// acc[o, p] = B[o] + product[o, p]: the product is an exact integer.
__global__ void bias_kernel(const double* product, const std::int64_t* bias, std::int64_t plane, std::int64_t count,
                            std::int64_t* acc) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  acc[n] = bias[n / plane] + static_cast<std::int64_t>(product[n]);
}

__global__ void rescale_kernel(const std::int64_t* acc, const std::int64_t* multiplier,
                               const std::int64_t* negative_multiplier, const std::int32_t* shift, std::int64_t plane,
                               std::int64_t count, std::int64_t* q) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  const std::int64_t c = n / plane;
  q[n] = arithmetic::rescale(acc[n], multiplier[c], negative_multiplier[c], shift[c]);
}

__global__ void tanh_kernel(const std::int64_t* acc, const std::int64_t* multiplier, const std::int32_t* shift,
                            const std::int64_t* table, std::int32_t entries, std::int64_t plane, std::int64_t count,
                            std::int64_t* v) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  const std::int64_t c = n / plane;
  v[n] = arithmetic::table_tanh(acc[n], multiplier[c], shift[c], table, entries);
}

__global__ void add_kernel(const std::int64_t* a, const std::int64_t* b, std::int64_t count, std::int64_t* sum) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  sum[n] = arithmetic::clamp_fixed(a[n] + b[n]);
}

__global__ void checkerboard_mask_kernel(const std::int64_t* x, std::int64_t width, std::int64_t plane,
                                         std::int32_t parity, std::int64_t count, std::int64_t* y) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count) return;
  const std::int64_t position = n % plane;
  y[n] = arithmetic::checkerboard_kept(position / width, position % width, parity) ? x[n] : 0;
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

// A node's parameters on the device.
struct DeviceNode {
  DeviceBuffer<double> weight;  // the [O, C k k] weight matrix
  DeviceBuffer<std::int64_t> bias, multiplier, negative_multiplier, table;
  DeviceBuffer<std::int32_t> shift;
};

class CudaBackend final : public IntegerNetworkRunner::Backend {
 public:
  CudaBackend(const IntegerNetwork& network, int device) : network_(network), device_(device) {
    DeviceScope scope(device_);
    const cuda::CublasLibrary& blas = cuda::cublas_library();
    check_cublas(blas.create(&blas_), "cublasCreate", __FILE__, __LINE__);
    check_cublas(blas.set_math_mode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode", __FILE__, __LINE__);
    for (const IntegerNode& node : network.nodes) {
      DeviceNode& d = nodes_.emplace_back();
      if (node.op == IntegerOp::convolution) {
        d.weight = DeviceBuffer<double>(weight_matrix(node.conv));
        d.bias = DeviceBuffer<std::int64_t>(node.conv.bias);
      }
      d.multiplier = DeviceBuffer<std::int64_t>(node.multiplier);
      d.negative_multiplier = DeviceBuffer<std::int64_t>(node.negative_multiplier);
      d.shift = DeviceBuffer<std::int32_t>(node.shift);
      d.table = DeviceBuffer<std::int64_t>(node.table);
    }
    thresholds_ = DeviceBuffer<std::int64_t>(network.thresholds);
    mean_multiplier_ = DeviceBuffer<std::int64_t>(network.mean_multiplier);
    mean_shift_ = DeviceBuffer<std::int32_t>(network.mean_shift);
  }
  ~CudaBackend() override {
    if (blas_) cuda::cublas_library().destroy(blas_);
  }

  // The tensors' buffers are kept between images (allocating and freeing
  // them for each would cost more than the network): a buffer is replaced
  // only when an image needs another size.
  void reset(const std::vector<Side>& sides) override {
    sides_ = sides;
    if (channels_.empty()) channels_ = network_.channels();
    tensors_.resize(sides.size());
  }

  void set(std::int32_t tensor, const std::vector<std::int64_t>& values) override {
    DeviceScope scope(device_);
    DeviceBuffer<std::int64_t>& buffer = sized(tensor);
    if (!values.empty())
      check_cuda(cudaMemcpy(buffer.get(), values.data(), values.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice),
                 "cudaMemcpy", __FILE__, __LINE__);
  }

  void compute(std::int32_t tensor) override {
    DeviceScope scope(device_);
    const std::size_t t = static_cast<std::size_t>(tensor);
    const IntegerNode& node = network_.nodes[t - 1];
    const DeviceNode& d = nodes_[t - 1];
    const std::int64_t plane = sides_[t].first * sides_[t].second;
    DeviceBuffer<std::int64_t>& out = sized(tensor);
    const std::int64_t count = static_cast<std::int64_t>(out.size());
    auto input = [&](std::size_t k) -> const DeviceBuffer<std::int64_t>& {
      return tensors_[static_cast<std::size_t>(node.inputs[k])];
    };
    switch (node.op) {
      case IntegerOp::convolution:
        convolution(node.conv, d, input(0), sides_[static_cast<std::size_t>(node.inputs[0])], sides_[t], out);
        break;
      case IntegerOp::rescale:
        rescale_kernel<<<blocks_for(count), kThreads>>>(input(0).get(), d.multiplier.get(), d.negative_multiplier.get(),
                                                        d.shift.get(), plane, count, out.get());
        cuda::check_launch("rescale_kernel", __FILE__, __LINE__);
        break;
      case IntegerOp::tanh:
        tanh_kernel<<<blocks_for(count), kThreads>>>(input(0).get(), d.multiplier.get(), d.shift.get(), d.table.get(),
                                                     static_cast<std::int32_t>(d.table.size()), plane, count,
                                                     out.get());
        cuda::check_launch("tanh_kernel", __FILE__, __LINE__);
        break;
      case IntegerOp::add:
        add_kernel<<<blocks_for(count), kThreads>>>(input(0).get(), input(1).get(), count, out.get());
        cuda::check_launch("add_kernel", __FILE__, __LINE__);
        break;
      case IntegerOp::checkerboard_mask:
        checkerboard_mask_kernel<<<blocks_for(count), kThreads>>>(input(0).get(), sides_[t].second, plane, node.parity,
                                                                  count, out.get());
        cuda::check_launch("checkerboard_mask_kernel", __FILE__, __LINE__);
        break;
      case IntegerOp::concat: {
        std::size_t offset = 0;
        for (std::size_t k = 0; k < node.inputs.size(); ++k) {
          copy_on_device(out.get() + offset, input(k).get(), input(k).size());
          offset += input(k).size();
        }
        break;
      }
      case IntegerOp::slice:
        copy_on_device(out.get(), input(0).get() + node.begin * plane, out.size());
        break;
      case IntegerOp::input:
        throw ConfigError("integer network: tensor " + std::to_string(tensor) + " is an input, set, not computed");
    }
  }

  std::vector<std::int64_t> read(std::int32_t tensor, std::int64_t offset, std::int64_t count) override {
    DeviceScope scope(device_);
    return tensors_[static_cast<std::size_t>(tensor)].to_host(static_cast<std::size_t>(offset),
                                                              static_cast<std::size_t>(count));
  }

  IntegerOutputs outputs(std::int32_t scales_tensor, std::int64_t offset, std::int32_t means_tensor,
                         std::int64_t means_offset, std::int64_t count, std::int32_t channel,
                         std::int64_t plane) override {
    DeviceScope scope(device_);
    IntegerOutputs out;
    const std::int32_t levels = network_.levels - 1;
    indices_.reserve(static_cast<std::size_t>(count));
    index_kernel<<<blocks_for(count), kThreads>>>(tensors_[static_cast<std::size_t>(scales_tensor)].get() + offset,
                                                  thresholds_.get() + std::int64_t(channel) * levels, levels, plane,
                                                  count, indices_.get());
    cuda::check_launch("index_kernel", __FILE__, __LINE__);
    out.indices = indices_.to_host(0, static_cast<std::size_t>(count));
    if (means_tensor < 0) return out;
    means_.reserve(static_cast<std::size_t>(count));
    mean_kernel<<<blocks_for(count), kThreads>>>(tensors_[static_cast<std::size_t>(means_tensor)].get() + means_offset,
                                                 mean_multiplier_.get() + channel, mean_shift_.get() + channel, plane,
                                                 count, means_.get());
    cuda::check_launch("mean_kernel", __FILE__, __LINE__);
    out.means = means_.to_host(0, static_cast<std::size_t>(count));
    return out;
  }

 private:
  // Tensor `tensor`'s buffer, of its size for the current image.
  DeviceBuffer<std::int64_t>& sized(std::int32_t tensor) {
    const std::size_t t = static_cast<std::size_t>(tensor);
    const std::size_t count = static_cast<std::size_t>(channels_[t] * sides_[t].first * sides_[t].second);
    if (tensors_[t].size() != count) tensors_[t] = DeviceBuffer<std::int64_t>(count);
    return tensors_[t];
  }

  // acc = B + W cols, block by block of output positions (see the CPU backend).
  void convolution(const IntegerConvLayer& layer, const DeviceNode& d, const DeviceBuffer<std::int64_t>& q, Side in,
                   Side out, DeviceBuffer<std::int64_t>& acc) {
    const std::int64_t rows = std::int64_t(layer.in_channels) * layer.kernel * layer.kernel;
    const std::int64_t positions = out.first * out.second;
    const std::int64_t block = std::max<std::int64_t>(1, std::min(positions, kColumnBlockValues / rows));
    const arithmetic::ConvGeometry geometry{layer.transposed ? 1 : 0,
                                            layer.in_channels,
                                            layer.kernel,
                                            layer.stride,
                                            layer.padding,
                                            in.first,
                                            in.second,
                                            out.second};
    columns_.reserve(static_cast<std::size_t>(rows * block));
    product_.reserve(static_cast<std::size_t>(layer.out_channels * positions));
    const double one = 1, zero = 0;
    for (std::int64_t first = 0; first < positions; first += block) {
      const std::int64_t count = std::min(block, positions - first);
      im2col_kernel<<<blocks_for(rows * count), kThreads>>>(geometry, q.get(), rows, first, count, columns_.get());
      cuda::check_launch("im2col_kernel", __FILE__, __LINE__);
      // Column-major: product^T [positions, O] (rows first..) = cols^T [count, rows] x W^T [rows, O].
      check_cublas(cuda::cublas_library().dgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(count),
                                                layer.out_channels, static_cast<int>(rows), &one, columns_.get(),
                                                static_cast<int>(count), d.weight.get(), static_cast<int>(rows), &zero,
                                                product_.get() + first, static_cast<int>(positions)),
                   "cublasDgemm", __FILE__, __LINE__);
    }
    const std::int64_t total = layer.out_channels * positions;
    bias_kernel<<<blocks_for(total), kThreads>>>(product_.get(), d.bias.get(), positions, total, acc.get());
    cuda::check_launch("bias_kernel", __FILE__, __LINE__);
  }

  const IntegerNetwork& network_;
  int device_;
  cublasHandle_t blas_ = nullptr;
  std::vector<DeviceNode> nodes_;
  DeviceBuffer<std::int64_t> thresholds_, mean_multiplier_;
  DeviceBuffer<std::int32_t> mean_shift_;
  std::vector<Side> sides_;
  std::vector<std::int32_t> channels_;
  std::vector<DeviceBuffer<std::int64_t>> tensors_;
  DeviceBuffer<double> columns_, product_;  // the GEMMs' workspace, kept between nodes and images
  DeviceBuffer<std::int32_t> indices_;
  DeviceBuffer<std::int64_t> means_;
};

// ---- The autoregressive backend: the latent's part of the network at the positions of one wavefront step ----

// acc[o, p_k] = B[o] + sum_{used taps u, c} V[o, c, tap_u] q[c, tap_u's position from p_k] for the k-th
// position p_k: one thread per (k, o), o fastest so that the weight [(c * used + u), O] is read
// coalesced; every product and partial sum an integer below 2^47, exact in f64.
__global__ void position_convolution_kernel(const double* weight, const std::int64_t* bias, const std::int32_t* taps,
                                            std::int32_t used, std::int32_t in_channels, std::int32_t out_channels,
                                            std::int32_t kernel, std::int32_t padding, const std::int64_t* q,
                                            std::int64_t height, std::int64_t width, const std::int64_t* positions,
                                            std::int64_t count, std::int64_t* acc) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count * out_channels) return;
  const std::int64_t o = n % out_channels, p = positions[n / out_channels], plane = height * width;
  double sum = 0;
  for (std::int32_t u = 0; u < used; ++u) {
    const std::int64_t source =
        arithmetic::same_size_tap(p / width, p % width, taps[u], kernel, padding, height, width);
    if (source < 0) continue;
    for (std::int32_t c = 0; c < in_channels; ++c)
      sum += weight[(static_cast<std::int64_t>(c) * used + u) * out_channels + o] *
             static_cast<double>(q[c * plane + source]);
  }
  acc[o * plane + p] = bias[o] + static_cast<std::int64_t>(sum);
}

// The pointwise nodes at the positions: one thread per (channel c, k-th position).
enum class PointwiseOp { rescale, tanh, add, checkerboard_mask, copy };

__global__ void position_pointwise_kernel(PointwiseOp op, const std::int64_t* x, const std::int64_t* second,
                                          const std::int64_t* multiplier, const std::int64_t* negative_multiplier,
                                          const std::int32_t* shift, const std::int64_t* table, std::int32_t entries,
                                          std::int32_t parity, std::int64_t width, std::int64_t plane,
                                          std::int32_t channels, const std::int64_t* positions, std::int64_t count,
                                          std::int64_t* y) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count * channels) return;
  const std::int64_t c = n / count, p = positions[n % count], e = c * plane + p;
  switch (op) {
    case PointwiseOp::rescale:
      y[e] = arithmetic::rescale(x[e], multiplier[c], negative_multiplier[c], shift[c]);
      break;
    case PointwiseOp::tanh:
      y[e] = arithmetic::table_tanh(x[e], multiplier[c], shift[c], table, entries);
      break;
    case PointwiseOp::add:
      y[e] = arithmetic::clamp_fixed(x[e] + second[e]);
      break;
    case PointwiseOp::checkerboard_mask:
      y[e] = arithmetic::checkerboard_kept(p / width, p % width, parity) ? x[e] : 0;
      break;
    case PointwiseOp::copy:  // x and y already offset to the channels copied
      y[e] = x[e];
      break;
  }
}

// q[c, p_k] = clamp(values[k * C + c]).
__global__ void position_input_kernel(const std::int64_t* values, std::int32_t channels, std::int64_t plane,
                                      const std::int64_t* positions, std::int64_t count, std::int64_t* q) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count * channels) return;
  q[n % channels * plane + positions[n / channels]] = arithmetic::clamp_fixed(values[n]);
}

// indices[k * C + c] and means[k * C + c] from the scales and means at p_k.
__global__ void position_outputs_kernel(const std::int64_t* scales, const std::int64_t* values,
                                        const std::int64_t* thresholds, std::int32_t levels_minus_one,
                                        const std::int64_t* mean_multiplier, const std::int32_t* mean_shift,
                                        std::int32_t channels, std::int64_t plane, const std::int64_t* positions,
                                        std::int64_t count, std::int32_t* indices, std::int64_t* means) {
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (n >= count * channels) return;
  const std::int64_t c = n % channels, e = c * plane + positions[n / channels];
  indices[n] = arithmetic::table_index(scales[e], thresholds + c * levels_minus_one, levels_minus_one);
  means[n] = arithmetic::fixed_mean(values[e], mean_multiplier[c], mean_shift[c]);
}

template <typename T>
void upload(DeviceBuffer<T>& buffer, const std::vector<T>& values) {
  buffer.reserve(values.size());
  if (!values.empty())
    check_cuda(cudaMemcpy(buffer.get(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy",
               __FILE__, __LINE__);
}

// Each wavefront step launches one kernel per node computed from the latent
// and copies its outputs to the host once: no round trip per element.
class AutoregressiveCudaBackend final : public AutoregressiveRunner::Backend {
 public:
  AutoregressiveCudaBackend(const IntegerNetwork& network, const AutoregressivePlan& plan, int device)
      : network_(network), plan_(plan), device_(device) {
    DeviceScope scope(device_);
    nodes_.resize(network.nodes.size() + 1);
    for (const std::vector<std::int32_t>* part : {&plan.after_input, &plan.before_outputs})
      for (std::int32_t t : *part) {
        const IntegerNode& node = network.nodes[static_cast<std::size_t>(t - 1)];
        DeviceNode& d = nodes_[static_cast<std::size_t>(t)];
        if (node.op == IntegerOp::convolution) {
          // [C * used, O]: the used taps' weights, output channel fastest.
          const IntegerConvLayer& conv = node.conv;
          const std::vector<std::int32_t>& taps = plan.taps[static_cast<std::size_t>(t)];
          const std::int64_t k2 = std::int64_t(conv.kernel) * conv.kernel,
                             used = static_cast<std::int64_t>(taps.size());
          std::vector<double> weight(static_cast<std::size_t>(conv.in_channels * used * conv.out_channels));
          for (std::int64_t o = 0; o < conv.out_channels; ++o)
            for (std::int64_t c = 0; c < conv.in_channels; ++c)
              for (std::int64_t u = 0; u < used; ++u)
                weight[static_cast<std::size_t>((c * used + u) * conv.out_channels + o)] =
                    conv.weight[static_cast<std::size_t>((o * conv.in_channels + c) * k2 + taps[u])];
          d.weight = DeviceBuffer<double>(weight);
          d.bias = DeviceBuffer<std::int64_t>(conv.bias);
          taps_.emplace(t, DeviceBuffer<std::int32_t>(taps));
        }
        d.multiplier = DeviceBuffer<std::int64_t>(node.multiplier);
        d.negative_multiplier = DeviceBuffer<std::int64_t>(node.negative_multiplier);
        d.shift = DeviceBuffer<std::int32_t>(node.shift);
        d.table = DeviceBuffer<std::int64_t>(node.table);
      }
    thresholds_ = DeviceBuffer<std::int64_t>(network.thresholds);
    mean_multiplier_ = DeviceBuffer<std::int64_t>(network.mean_multiplier);
    mean_shift_ = DeviceBuffer<std::int32_t>(network.mean_shift);
  }

  void reset(std::int64_t height, std::int64_t width) override {
    DeviceScope scope(device_);
    height_ = height;
    width_ = width;
    tensors_.resize(plan_.channels.size());
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      if (!plan_.held[t]) continue;
      const std::size_t count = static_cast<std::size_t>(plan_.channels[t] * height * width);
      if (tensors_[t].size() != count) tensors_[t] = DeviceBuffer<std::int64_t>(count);
      if (count > 0)
        check_cuda(cudaMemset(tensors_[t].get(), 0, count * sizeof(std::int64_t)), "cudaMemset", __FILE__, __LINE__);
    }
  }

  void set_whole(std::int32_t tensor, const std::vector<std::int64_t>& values) override {
    DeviceScope scope(device_);
    upload(tensors_[static_cast<std::size_t>(tensor)], values);
  }

  void use_positions(const std::vector<std::int64_t>& positions) override {
    DeviceScope scope(device_);
    count_ = static_cast<std::int64_t>(positions.size());
    upload(positions_, positions);
  }

  void set_input(const std::vector<std::int64_t>& values) override {
    DeviceScope scope(device_);
    upload(values_, values);
    const std::int32_t channels = plan_.channels[static_cast<std::size_t>(plan_.input)];
    position_input_kernel<<<blocks_for(count_ * channels), kThreads>>>(values_.get(), channels, height_ * width_,
                                                                       positions_.get(), count_, tensor(plan_.input));
    cuda::check_launch("position_input_kernel", __FILE__, __LINE__);
  }

  void compute(std::int32_t t) override {
    DeviceScope scope(device_);
    const IntegerNode& node = network_.nodes[static_cast<std::size_t>(t - 1)];
    const DeviceNode& d = nodes_[static_cast<std::size_t>(t)];
    const std::int32_t channels = plan_.channels[static_cast<std::size_t>(t)];
    const std::int64_t plane = height_ * width_;
    auto pointwise = [&](PointwiseOp op, const std::int64_t* x, const std::int64_t* second, std::int32_t count,
                         std::int64_t* y) {
      position_pointwise_kernel<<<blocks_for(count_ * count), kThreads>>>(
          op, x, second, d.multiplier.get(), d.negative_multiplier.get(), d.shift.get(), d.table.get(),
          static_cast<std::int32_t>(d.table.size()), node.parity, width_, plane, count, positions_.get(), count_, y);
      cuda::check_launch("position_pointwise_kernel", __FILE__, __LINE__);
    };
    switch (node.op) {
      case IntegerOp::convolution: {
        const IntegerConvLayer& conv = node.conv;
        const DeviceBuffer<std::int32_t>& taps = taps_.at(t);
        position_convolution_kernel<<<blocks_for(count_ * conv.out_channels), kThreads>>>(
            d.weight.get(), d.bias.get(), taps.get(), static_cast<std::int32_t>(taps.size()), conv.in_channels,
            conv.out_channels, conv.kernel, conv.padding, tensor(node.inputs[0]), height_, width_, positions_.get(),
            count_, tensor(t));
        cuda::check_launch("position_convolution_kernel", __FILE__, __LINE__);
        break;
      }
      case IntegerOp::rescale:
        pointwise(PointwiseOp::rescale, tensor(node.inputs[0]), nullptr, channels, tensor(t));
        break;
      case IntegerOp::tanh:
        pointwise(PointwiseOp::tanh, tensor(node.inputs[0]), nullptr, channels, tensor(t));
        break;
      case IntegerOp::add:
        pointwise(PointwiseOp::add, tensor(node.inputs[0]), tensor(node.inputs[1]), channels, tensor(t));
        break;
      case IntegerOp::checkerboard_mask:
        pointwise(PointwiseOp::checkerboard_mask, tensor(node.inputs[0]), nullptr, channels, tensor(t));
        break;
      case IntegerOp::concat: {
        std::int64_t offset = 0;
        for (std::int32_t input : node.inputs) {
          const std::int32_t part = plan_.channels[static_cast<std::size_t>(input)];
          pointwise(PointwiseOp::copy, tensor(input), nullptr, part, tensor(t) + offset * plane);
          offset += part;
        }
        break;
      }
      case IntegerOp::slice:
        pointwise(PointwiseOp::copy, tensor(node.inputs[0]) + node.begin * plane, nullptr, channels, tensor(t));
        break;
      case IntegerOp::input:
        break;
    }
  }

  IntegerOutputs outputs() override {
    DeviceScope scope(device_);
    const std::int32_t channels = plan_.channels[static_cast<std::size_t>(network_.scales)];
    const std::size_t count = static_cast<std::size_t>(count_ * channels);
    indices_.reserve(count);
    means_.reserve(count);
    position_outputs_kernel<<<blocks_for(count_ * channels), kThreads>>>(
        tensor(network_.scales), tensor(network_.means), thresholds_.get(), network_.levels - 1, mean_multiplier_.get(),
        mean_shift_.get(), channels, height_ * width_, positions_.get(), count_, indices_.get(), means_.get());
    cuda::check_launch("position_outputs_kernel", __FILE__, __LINE__);
    IntegerOutputs out;
    out.shape = {count_, channels};
    out.indices = indices_.to_host(0, count);
    out.means = means_.to_host(0, count);
    return out;
  }

 private:
  std::int64_t* tensor(std::int32_t t) { return tensors_[static_cast<std::size_t>(t)].get(); }

  const IntegerNetwork& network_;
  const AutoregressivePlan& plan_;
  int device_;
  std::vector<DeviceNode> nodes_;  // by tensor
  std::map<std::int32_t, DeviceBuffer<std::int32_t>> taps_;
  DeviceBuffer<std::int64_t> thresholds_, mean_multiplier_;
  DeviceBuffer<std::int32_t> mean_shift_;
  std::int64_t height_ = 0, width_ = 0, count_ = 0;
  std::vector<DeviceBuffer<std::int64_t>> tensors_;
  DeviceBuffer<std::int64_t> positions_, values_, means_;
  DeviceBuffer<std::int32_t> indices_;
};

}  // namespace

std::unique_ptr<IntegerNetworkRunner::Backend> make_cuda_backend(const IntegerNetwork& network, int device) {
  return std::make_unique<CudaBackend>(network, device);
}

std::unique_ptr<AutoregressiveRunner::Backend> make_autoregressive_cuda(const IntegerNetwork& network,
                                                                        const AutoregressivePlan& plan, int device) {
  return std::make_unique<AutoregressiveCudaBackend>(network, plan, device);
}

}  // namespace plexus::codec

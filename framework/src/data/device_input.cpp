#include "plexus/data/device_input.h"

#include <chrono>
#include <vector>

#include "plexus/error.h"

#if PLEXUS_WITH_CUDA
#include "bytes_to_unit_kernel.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#endif

namespace plexus::data {

namespace {

void check_destination(const Tensor& destination, const Shape& shape) {
  if (destination.shape() != shape || destination.dtype() != DType::f32)
    throw ShapeError("DeviceInput: the destination is " + destination.describe() + ", expected f32" + shape_str(shape));
}

}  // namespace

#if PLEXUS_WITH_CUDA

using cuda::check_cuda;

// Slot s receives batch k for every k = s (mod depth): device memory for its
// bytes and two events: `copied` (host-to-device done: the step may convert
// the bytes; the loader's buffer may take another batch) and `consumed` (the
// step's stream has converted them: the slot may be overwritten).
struct DeviceInput::Pipeline {
  struct Slot {
    std::uint8_t* on_device = nullptr;  // the batch's bytes (tensors are f32/f64 only)
    cudaEvent_t copied = nullptr;
    cudaEvent_t consumed = nullptr;
  };
  std::vector<Slot> slots;
  cudaStream_t copy_stream = nullptr;
  std::size_t bytes = 0;
  std::int64_t taken = 0;        // batches handed to the step so far
  BatchLoader::Lease in_flight;  // the last batch sent: its buffer is read until `copied`

  Pipeline(Device device, const Shape& shape, int depth) {
    bytes = static_cast<std::size_t>(shape_numel(shape));
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice", __FILE__, __LINE__);
    check_cuda(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", __FILE__,
               __LINE__);
    slots.resize(static_cast<std::size_t>(depth));
    for (Slot& slot : slots) {
      check_cuda(cudaMalloc(&slot.on_device, bytes), "cudaMalloc", __FILE__, __LINE__);
      check_cuda(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming), "cudaEventCreate", __FILE__, __LINE__);
      check_cuda(cudaEventCreateWithFlags(&slot.consumed, cudaEventDisableTiming), "cudaEventCreate", __FILE__,
                 __LINE__);
    }
  }

  ~Pipeline() {
    // Nothing may still read the loader's buffer or the slots once they go.
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    for (Slot& slot : slots) {
      if (slot.consumed) cudaEventSynchronize(slot.consumed);
      if (slot.copied) cudaEventDestroy(slot.copied);
      if (slot.consumed) cudaEventDestroy(slot.consumed);
      if (slot.on_device) cudaFree(slot.on_device);
    }
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }

  template <typename TakeBatch>
  void next_into(Context& ctx, Tensor& destination, TakeBatch&& take_batch) {
    const std::size_t depth = slots.size();
    if (taken > 0) {
      // Stay at most one step ahead: the previous batch's step has started,
      // so its copy is done and the loader may reuse its buffer.
      check_cuda(cudaEventSynchronize(slots[static_cast<std::size_t>(taken - 1) % depth].consumed),
                 "cudaEventSynchronize", __FILE__, __LINE__);
      in_flight.release();
    }
    BatchLoader::Lease batch = take_batch();
    Slot& slot = slots[static_cast<std::size_t>(taken) % depth];
    check_cuda(cudaStreamWaitEvent(copy_stream, slot.consumed, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
    check_cuda(cudaMemcpyAsync(slot.on_device, batch.bytes(), bytes, cudaMemcpyHostToDevice, copy_stream),
               "cudaMemcpyAsync", __FILE__, __LINE__);
    check_cuda(cudaEventRecord(slot.copied, copy_stream), "cudaEventRecord", __FILE__, __LINE__);
    const cudaStream_t stream = cuda::stream(ctx);
    check_cuda(cudaStreamWaitEvent(stream, slot.copied, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
    cuda::bytes_to_unit(stream, slot.on_device, destination.data<float>(), bytes);
    check_cuda(cudaEventRecord(slot.consumed, stream), "cudaEventRecord", __FILE__, __LINE__);
    in_flight = std::move(batch);
    ++taken;
  }
};

#else

struct DeviceInput::Pipeline {
  Pipeline(Device, const Shape&, int) {}
  template <typename TakeBatch>
  void next_into(Context&, Tensor&, TakeBatch&&) {}
};

#endif

DeviceInput::DeviceInput(BatchLoader& loader, Device device, Shape shape, int depth)
    : loader_(loader), device_(device), shape_(std::move(shape)) {
  if (depth < 2) throw ConfigError("DeviceInput: the depth must be >= 2, got " + std::to_string(depth));
  if (device_.is_cuda()) pipeline_ = std::make_unique<Pipeline>(device_, shape_, depth);
}

DeviceInput::~DeviceInput() = default;

BatchLoader::Lease DeviceInput::take_batch() {
  if (loader_.batch_shape() != shape_)
    throw ShapeError("DeviceInput: the loader's batches are u8" + shape_str(loader_.batch_shape()) + ", expected " +
                     shape_str(shape_));
  const auto start = std::chrono::steady_clock::now();
  BatchLoader::Lease batch = loader_.next_lease();
  seconds_waiting_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return batch;
}

void DeviceInput::next_into(Context& ctx, Tensor& destination) {
  check_destination(destination, shape_);
  if (destination.device() != device_ || ctx.device() != device_)
    throw DeviceError("DeviceInput for " + device_.str() + " asked to fill " + destination.describe() + " with a " +
                      ctx.device().str() + " context");
  if (!pipeline_) {
    BatchLoader::Lease batch = take_batch();
    bytes_to_unit(batch.bytes(), destination.data<float>(), batch.size());
    return;
  }
  pipeline_->next_into(ctx, destination, [this] { return take_batch(); });
}

}  // namespace plexus::data

#include "plexus/data/device_input.h"

#include <cstring>
#include <vector>

#include "plexus/error.h"

#if PLEXUS_WITH_CUDA
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#endif

namespace plexus::data {

namespace {

void check_batch(const Tensor& batch, const Shape& shape, const char* what) {
  if (batch.shape() != shape || batch.dtype() != DType::f32)
    throw ShapeError(std::string("DeviceInput: ") + what + " is " + batch.describe() + ", expected f32" +
                     shape_str(shape));
}

}  // namespace

#if PLEXUS_WITH_CUDA

using cuda::check_cuda;

// Slot s holds batch k for every k = s (mod depth): pinned host memory, its
// device copy, and two events: `copied` (host-to-device done: the pinned
// buffer may be refilled, the step may read the device copy) and `consumed`
// (the step's stream has taken the device copy: it may be overwritten).
struct DeviceInput::Pipeline {
  struct Slot {
    float* pinned = nullptr;
    Tensor on_device;
    cudaEvent_t copied = nullptr;
    cudaEvent_t consumed = nullptr;
  };
  std::vector<Slot> slots;
  cudaStream_t copy_stream = nullptr;
  std::size_t bytes = 0;
  std::int64_t taken = 0;  // batches handed to the step so far
  bool primed = false;

  Pipeline(Device device, const Shape& shape, int depth) {
    bytes = static_cast<std::size_t>(shape_numel(shape)) * sizeof(float);
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice", __FILE__, __LINE__);
    check_cuda(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", __FILE__,
               __LINE__);
    slots.resize(static_cast<std::size_t>(depth));
    for (Slot& slot : slots) {
      check_cuda(cudaMallocHost(&slot.pinned, bytes), "cudaMallocHost", __FILE__, __LINE__);
      slot.on_device = Tensor(shape, DType::f32, device);
      check_cuda(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming), "cudaEventCreate", __FILE__,
                 __LINE__);
      check_cuda(cudaEventCreateWithFlags(&slot.consumed, cudaEventDisableTiming), "cudaEventCreate", __FILE__,
                 __LINE__);
    }
    // The device buffers were zeroed on the legacy stream, which the
    // non-blocking copy stream does not wait for.
    check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", __FILE__, __LINE__);
  }

  ~Pipeline() {
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    for (Slot& slot : slots) {
      if (slot.consumed) cudaEventSynchronize(slot.consumed);
      if (slot.copied) cudaEventDestroy(slot.copied);
      if (slot.consumed) cudaEventDestroy(slot.consumed);
      if (slot.pinned) cudaFreeHost(slot.pinned);
    }
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }

  // The loader's next batch into `slot`, sent to the device once the step
  // that last read the slot has taken its copy.
  void fill(Slot& slot, BatchLoader& loader, const Shape& shape) {
    Tensor batch = loader.next();
    check_batch(batch, shape, "a batch from the loader");
    check_cuda(cudaEventSynchronize(slot.copied), "cudaEventSynchronize", __FILE__, __LINE__);
    std::memcpy(slot.pinned, batch.data<float>(), bytes);
    check_cuda(cudaStreamWaitEvent(copy_stream, slot.consumed, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
    check_cuda(cudaMemcpyAsync(slot.on_device.raw_data(), slot.pinned, bytes, cudaMemcpyHostToDevice, copy_stream),
               "cudaMemcpyAsync", __FILE__, __LINE__);
    check_cuda(cudaEventRecord(slot.copied, copy_stream), "cudaEventRecord", __FILE__, __LINE__);
  }

  void next_into(Context& ctx, Tensor& destination, BatchLoader& loader, const Shape& shape) {
    const std::size_t depth = slots.size();
    if (!primed) {
      for (Slot& slot : slots) fill(slot, loader, shape);
      primed = true;
    }
    // Stay at most one step ahead: the previous batch's step has started.
    if (taken > 0)
      check_cuda(cudaEventSynchronize(slots[static_cast<std::size_t>(taken - 1) % depth].consumed),
                 "cudaEventSynchronize", __FILE__, __LINE__);
    Slot& slot = slots[static_cast<std::size_t>(taken) % depth];
    const cudaStream_t stream = cuda::stream(ctx);
    check_cuda(cudaStreamWaitEvent(stream, slot.copied, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
    check_cuda(cudaMemcpyAsync(destination.raw_data(), slot.on_device.raw_data(), bytes, cudaMemcpyDeviceToDevice,
                               stream),
               "cudaMemcpyAsync", __FILE__, __LINE__);
    check_cuda(cudaEventRecord(slot.consumed, stream), "cudaEventRecord", __FILE__, __LINE__);
    ++taken;
    fill(slot, loader, shape);  // batch taken - 1 + depth
  }
};

#else

struct DeviceInput::Pipeline {
  Pipeline(Device, const Shape&, int) {}
  void next_into(Context&, Tensor&, BatchLoader&, const Shape&) {}
};

#endif

DeviceInput::DeviceInput(BatchLoader& loader, Device device, Shape shape, int depth)
    : loader_(loader), device_(device), shape_(std::move(shape)) {
  if (depth < 2) throw ConfigError("DeviceInput: the depth must be >= 2, got " + std::to_string(depth));
  if (device_.is_cuda()) pipeline_ = std::make_unique<Pipeline>(device_, shape_, depth);
}

DeviceInput::~DeviceInput() = default;

void DeviceInput::next_into(Context& ctx, Tensor& destination) {
  check_batch(destination, shape_, "the destination");
  if (destination.device() != device_ || ctx.device() != device_)
    throw DeviceError("DeviceInput for " + device_.str() + " asked to fill " + destination.describe() + " with a " +
                      ctx.device().str() + " context");
  if (!pipeline_) {
    Tensor batch = loader_.next();
    check_batch(batch, shape_, "a batch from the loader");
    destination.copy_from(batch);
    return;
  }
  pipeline_->next_into(ctx, destination, loader_, shape_);
}

}  // namespace plexus::data

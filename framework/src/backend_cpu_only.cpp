#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "plexus/host_memory.h"

namespace plexus::device_memory {

namespace {
[[noreturn]] void no_cuda(Device device) {
  throw DeviceError("device " + device.str() +
                    " requested, but this Plexus was built without CUDA "
                    "(reconfigure with -DPLEXUS_CUDA=ON on a machine with the CUDA toolkit)");
}
}  // namespace

void* allocate(std::size_t bytes, Device device) {
  if (device.is_cuda()) no_cuda(device);
  try {
    return host_memory::allocate_zeroed(bytes);
  } catch (const std::bad_alloc&) {
    throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
}

void release(void* pointer, Device) noexcept { host_memory::release(pointer); }

void* allocate_host_staging(std::size_t bytes, Device destination) {
  if (destination.is_cuda()) no_cuda(destination);
  return allocate(bytes, destination);
}

void release_host_staging(void* pointer, Device) noexcept { host_memory::release(pointer); }

void copy(void* destination, Device destination_device, const void* source, Device source_device, std::size_t bytes) {
  if (destination_device.is_cuda()) no_cuda(destination_device);
  if (source_device.is_cuda()) no_cuda(source_device);
  if (bytes) std::memcpy(destination, source, bytes);
}

void fill_zero(void* pointer, std::size_t bytes, Device device) {
  if (device.is_cuda()) no_cuda(device);
  if (bytes) std::memset(pointer, 0, bytes);
}

void fill_zero(const std::vector<ByteSpan>& spans, Device device) {
  for (const ByteSpan& span : spans) fill_zero(span.pointer, span.bytes, device);
}

int cuda_device_count() { return 0; }
bool built_with_cuda() { return false; }
void set_capture_stream(void*) {}

}  // namespace plexus::device_memory

namespace plexus::cuda {
struct CudaResources {};
CudaResources* create_resources(int device, std::uint64_t) {
  device_memory::allocate(0, Device::cuda(device));  // throws "built without CUDA"
  return nullptr;
}
void destroy_resources(CudaResources*) noexcept {}
void reseed(CudaResources&, std::uint64_t) {}
void set_tf32(CudaResources&, bool) {}
void synchronize(CudaResources&) {}
void set_deferred_joins(CudaResources&, bool) {}
void join_branches(CudaResources&) {}
}  // namespace plexus::cuda

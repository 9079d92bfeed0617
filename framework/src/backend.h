#pragma once
// The device backend: raw memory and the CUDA resources of a Context. CPU
// memory is zeroed host memory (plexus/host_memory.h); CUDA memory comes from the stream-ordered
// pool (cudaMallocAsync). Two implementations: backend_cuda.cpp when built
// with CUDA, backend_cpu_only.cpp otherwise (which refuses any CUDA request
// with a message saying so).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plexus/tensor.h"

namespace plexus::device_memory {

void* allocate(std::size_t bytes, Device device);
void release(void* pointer, Device device) noexcept;
void copy(void* destination, Device destination_device, const void* source, Device source_device, std::size_t bytes);
void fill_zero(void* pointer, std::size_t bytes, Device device);
// Every span's bytes set to zero, as fill_zero on each; on CUDA one kernel
// launch for up to 64 spans at a time (on the stream fill_zero uses).
struct ByteSpan {
  void* pointer;
  std::size_t bytes;
};
void fill_zero(const std::vector<ByteSpan>& spans, Device device);
// Host memory that data bound for `destination` is staged in: page-locked
// (cudaMallocHost) for a GPU, so copies from it to the device run
// asynchronously at full speed; plain aligned memory for the CPU.
void* allocate_host_staging(std::size_t bytes, Device destination);
void release_host_staging(void* pointer, Device destination) noexcept;
int cuda_device_count();
bool built_with_cuda();
// While a CUDA graph is recorded on `stream` (a cudaStream_t) by this
// thread, allocate, release, fill_zero and device copies are enqueued on it;
// nullptr restores the legacy stream. No-op without CUDA.
void set_capture_stream(void* stream);

}  // namespace plexus::device_memory

namespace plexus::cuda {
struct CudaResources;
CudaResources* create_resources(int device, std::uint64_t seed);
void destroy_resources(CudaResources* resources) noexcept;
void reseed(CudaResources& resources, std::uint64_t seed);
void set_tf32(CudaResources& resources, bool allow);
void synchronize(CudaResources& resources);
// Context::DeferredJoins and Context::join_branches (plexus/cuda/branch.h).
void set_deferred_joins(CudaResources& resources, bool deferred);
void join_branches(CudaResources& resources);
// *seed_on_device = seed, enqueued on `stream` (a cudaStream_t; framework/src/cuda/random.cu).
void write_seed(void* stream, std::uint64_t* seed_on_device, std::uint64_t seed);
}  // namespace plexus::cuda

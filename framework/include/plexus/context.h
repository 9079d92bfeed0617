#pragma once
// Context: everything a kernel needs besides its tensors. The device, the
// train/eval mode, a seeded random generator, and on CUDA the stream and the
// cuBLAS/cuRAND handles (see plexus/cuda/cuda_context.h). One Context is
// passed to every forward and backward.
#include <cstdint>
#include <memory>
#include <random>

#include "plexus/tensor.h"

namespace plexus {

namespace cuda {
struct CudaResources;  // stream, cuBLAS and cuRAND handles; defined with CUDA
}

class Context {
 public:
  explicit Context(Device device = Device::cpu(), std::uint64_t seed = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }

  // Training mode: stochastic layers (UniformNoise) sample; eval mode: they
  // become deterministic (rounding).
  bool training() const { return training_; }
  void set_training(bool training) { training_ = training; }

  // Restarts every generator of this context from `seed`, so the same
  // sequence of calls sees the same random numbers (gradient checks rely on it).
  void reseed(std::uint64_t seed);
  std::uint64_t seed() const { return seed_; }
  // The host generator. CUDA layers use cuda::curand(ctx) instead.
  std::mt19937_64& random() { return random_; }
  // A fresh value for seeding a device generator; advances the host generator.
  std::uint64_t next_seed() { return random_(); }

  // Use TF32 tensor-core math for f32 GEMMs on CUDA (faster, ~1e-3 relative).
  bool allow_tf32() const { return allow_tf32_; }
  void set_allow_tf32(bool allow);

  // Waits for queued device work; a no-op on the CPU.
  void synchronize();

  cuda::CudaResources* cuda_resources() const { return cuda_.get(); }

 private:
  Device device_;
  bool training_ = true;
  bool allow_tf32_ = false;
  std::uint64_t seed_ = 0;
  std::mt19937_64 random_;
  std::unique_ptr<cuda::CudaResources, void (*)(cuda::CudaResources*)> cuda_{nullptr, nullptr};
};

// True when this build has CUDA and at least one GPU is visible.
bool cuda_available();
// True when this build was compiled with the CUDA backend.
bool built_with_cuda();

}  // namespace plexus

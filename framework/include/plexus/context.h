#pragma once
// Context: everything a kernel needs besides its tensors. The device, the
// train/eval mode, a seeded random generator, and on CUDA the stream and the
// cuBLAS/cuRAND handles (see plexus/cuda/cuda_context.h). One Context is
// passed to every forward and backward.
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "plexus/tensor.h"

namespace plexus {

// How f32 work runs on CUDA (CPU kernels always compute in exact f32/f64):
//   f32   strict: every product in f32;
//   tf32  f32 storage, matrix products and convolutions on TF32 tensor cores
//         (10 mantissa bits per operand, f32 accumulation, ~1e-3 relative);
//   bf16  bf16 activations with f32 master weights (not implemented yet:
//         Context::set_precision rejects it).
// f64 tensors are never affected.
enum class Precision { f32, tf32, bf16 };

// "f32", "tf32", "bf16" -> Precision; anything else throws ConfigError naming the text.
Precision parse_precision(const std::string& text);
const char* precision_name(Precision precision);

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

  // The precision policy for f32 work on CUDA (see Precision); f32 by default.
  // Throws ConfigError for a policy this build does not implement (bf16).
  Precision precision() const { return precision_; }
  void set_precision(Precision precision);

  // Use TF32 tensor-core math for f32 GEMMs and convolutions on CUDA (faster,
  // ~1e-3 relative): precision() == tf32. set_allow_tf32(b) is
  // set_precision(b ? tf32 : f32).
  bool allow_tf32() const { return precision_ == Precision::tf32; }
  void set_allow_tf32(bool allow) { set_precision(allow ? Precision::tf32 : Precision::f32); }

  // Waits for queued device work; a no-op on the CPU.
  void synchronize();

  cuda::CudaResources* cuda_resources() const { return cuda_.get(); }

 private:
  Device device_;
  bool training_ = true;
  Precision precision_ = Precision::f32;
  std::uint64_t seed_ = 0;
  std::mt19937_64 random_;
  std::unique_ptr<cuda::CudaResources, void (*)(cuda::CudaResources*)> cuda_{nullptr, nullptr};
};

// True when this build has CUDA and at least one GPU is visible.
bool cuda_available();
// True when this build was compiled with the CUDA backend.
bool built_with_cuda();

}  // namespace plexus

#pragma once
// Context: everything a kernel needs besides its tensors. The device, the
// train/eval mode, a seeded random generator, and on CUDA the stream and the
// cuBLAS/cuRAND handles (see plexus/cuda/cuda_context.h). One Context is
// passed to every forward and backward.
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "plexus/tensor.h"

namespace plexus {

// How f32 work runs on CUDA (CPU kernels always compute in exact f32/f64):
//   f32   strict: every product in f32;
//   tf32  f32 storage, matrix products and convolutions on TF32 tensor cores
//         (10 mantissa bits per operand, f32 accumulation, ~1e-3 relative);
//   bf16  f32 storage, products on BF16 tensor cores (operands rounded to
//         bf16 = 8 significant bits, round to nearest even: within 4e-3
//         relative each, f32 accumulation): the convolutions' implicit-GEMM
//         engine and every cuBLAS product (cuda::gemm: bf16 copies of the
//         operands into cublasGemmEx). GDN's tensor-core kernels, which
//         have no BF16 variant, run as under tf32. Weights, optimiser state, the entropy model and
//         losses stay f32. bf16 STORAGE of activations (half the bytes) is
//         not implemented: tensors stay f32.
// f64 tensors are never affected.
enum class Precision { f32, tf32, bf16 };

// Kernel paths that can be turned off, to compare them with what replaces
// them in one build (a benchmark times both). Every one is on by default.
// A Context reads them from the environment when it is made
// (from_environment, the one place that reads these variables): a variable
// set to "0" turns its path off. Kernels read them from the Context
// (Context::kernel_settings); set_kernel_settings overrides them.
struct KernelSettings {
  // PLEXUS_CONV_WGMMA: the convolutions' sm_90a wgmma kernels on a Hopper
  // GPU (off: the mma.sync kernels).
  bool conv_wgmma = true;
  // PLEXUS_CONV_WGMMA_TMA: the wgmma gather's TMA loads of the source (off:
  // the copies by threads).
  bool conv_wgmma_tma = true;
  // PLEXUS_CONV_WGMMA_WGRAD_NHWC: the wgmma weight gradient reads the NHWC
  // copy of X at bf16 precision (off: the phase copies).
  bool conv_wgmma_weight_grad_nhwc = true;
  // PLEXUS_CONV_BRANCH: the convolutions' parameter gradients run on a
  // stream branch beside the input gradient (off: in line).
  bool conv_branch = true;
  // PLEXUS_GDN_BF16: GDN's tensor-core contractions as BF16 products at bf16
  // precision (off: TF32 products).
  bool gdn_bf16 = true;
  // PLEXUS_GDN_BF16_TILES: GDN's kernels on bf16 tiles when every tensor is
  // bf16 (off: gdn_tensor_core.cu's kernels).
  bool gdn_bf16_tiles = true;
  // PLEXUS_BF16_STORAGE: bf16 activation storage under bf16 precision on
  // CUDA (activation_storage_for, plexus/net.h; off: f32 blobs).
  bool bf16_storage = true;
  // PLEXUS_FUSE_ACTIVATIONS: training nets fuse activations into their
  // producers (activation_fusion_for_training, plexus/net.h; off: unfused).
  bool fuse_activations = true;

  // The defaults, with each path whose variable is "0" turned off.
  static KernelSettings from_environment();
};

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
  Precision precision() const { return precision_; }
  void set_precision(Precision precision);

  // Whether f32 GEMMs and convolutions on CUDA may use TF32 tensor-core math
  // (faster, ~1e-3 relative): precision() is tf32, or bf16, whose products
  // without a BF16 variant (GDN's tensor-core kernels) run as TF32. set_allow_tf32(b) is
  // set_precision(b ? tf32 : f32).
  bool allow_tf32() const { return precision_ != Precision::f32; }
  // Whether kernels that have a BF16 tensor-core variant (the convolution
  // engine, cuda::gemm's f32 products) use it: precision() == bf16.
  bool bf16_products() const { return precision_ == Precision::bf16; }
  void set_allow_tf32(bool allow) { set_precision(allow ? Precision::tf32 : Precision::f32); }

  // The kernel paths in use (KernelSettings); from the environment when the
  // Context is made.
  const KernelSettings& kernel_settings() const { return kernel_settings_; }
  void set_kernel_settings(const KernelSettings& settings) { kernel_settings_ = settings; }

  // Waits for queued device work, branches included; a no-op on the CPU.
  void synchronize();

  // A layer may run part of a CUDA pass on a branch beside the context's
  // stream (cuda::Branch, e.g. a convolution's weight gradient) and joins
  // it before the pass returns. While a DeferredJoins lives, those joins
  // wait instead until join_branches() or the DeferredJoins' end, so the
  // branch also runs beside the passes that follow: Net::backward defers
  // them, joining before each gradients-ready hook and observer call and
  // at its end. No-ops on the CPU.
  void join_branches();
  class DeferredJoins {
   public:
    explicit DeferredJoins(Context& ctx);
    ~DeferredJoins();  // joins
    DeferredJoins(const DeferredJoins&) = delete;
    DeferredJoins& operator=(const DeferredJoins&) = delete;

   private:
    Context& ctx_;
  };

  cuda::CudaResources* cuda_resources() const { return cuda_.get(); }

  // State shared by the layers that run on this context, one object per
  // key, default-constructed on first use and kept as long as the context:
  // e.g. the convolution engine's scratch buffers, which every convolution
  // uses in turn. Layers on one context run one after another on its
  // stream, so a buffer one layer's pass used may be reused by the next
  // pass that is enqueued after it. Work a layer puts on a stream branch
  // (plexus/cuda/branch.h) may still be running then, so it keeps to
  // buffers that passes on the context's own stream never use. A key must
  // always name the same type.
  template <class T>
  T& shared_state(const std::string& key) {
    std::shared_ptr<void>& state = shared_state_[key];
    if (!state) state = std::make_shared<T>();
    return *static_cast<T*>(state.get());
  }
  // Counts the times memory that a recorded CUDA graph may have captured
  // was replaced on this context (a shared scratch buffer that grew:
  // note_memory_replaced). StepGraph records its step again when it changed.
  std::uint64_t memory_generation() const { return memory_generation_; }
  void note_memory_replaced() const { ++memory_generation_; }

 private:
  Device device_;
  bool training_ = true;
  Precision precision_ = Precision::f32;
  KernelSettings kernel_settings_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 random_;
  std::unique_ptr<cuda::CudaResources, void (*)(cuda::CudaResources*)> cuda_{nullptr, nullptr};
  std::map<std::string, std::shared_ptr<void>> shared_state_;
  mutable std::uint64_t memory_generation_ = 0;
};

// True when this build has CUDA and at least one GPU is visible.
bool cuda_available();
// True when this build was compiled with the CUDA backend.
bool built_with_cuda();

}  // namespace plexus

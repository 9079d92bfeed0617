#include "plexus/context.h"

#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "plexus/cpu_gemm_blocking.h"
#include "plexus/error.h"

namespace plexus {

KernelSettings KernelSettings::from_environment() {
  const auto on = [](const char* name) {
    const char* setting = std::getenv(name);
    return !(setting && std::strcmp(setting, "0") == 0);
  };
  KernelSettings settings;
  settings.conv_wgmma = on("PLEXUS_CONV_WGMMA");
  settings.conv_wgmma_tma = on("PLEXUS_CONV_WGMMA_TMA");
  settings.conv_wgmma_weight_grad_nhwc = on("PLEXUS_CONV_WGMMA_WGRAD_NHWC");
  settings.conv_branch = on("PLEXUS_CONV_BRANCH");
  settings.gdn_bf16 = on("PLEXUS_GDN_BF16");
  settings.gdn_bf16_tiles = on("PLEXUS_GDN_BF16_TILES");
  settings.bf16_storage = on("PLEXUS_BF16_STORAGE");
  settings.fuse_activations = on("PLEXUS_FUSE_ACTIVATIONS");
  return settings;
}

Context::Context(Device device, std::uint64_t seed)
    : device_(device), kernel_settings_(KernelSettings::from_environment()) {
  fix_cpu_gemm_blocking();
  if (device.is_cuda()) cuda_ = {cuda::create_resources(device.index, seed), &cuda::destroy_resources};
  reseed(seed);
}

Context::~Context() = default;

void Context::reseed(std::uint64_t seed) {
  seed_ = seed;
  random_.seed(seed);
  if (cuda_) cuda::reseed(*cuda_, seed);
}

Precision parse_precision(const std::string& text) {
  if (text == "f32") return Precision::f32;
  if (text == "tf32") return Precision::tf32;
  if (text == "bf16") return Precision::bf16;
  throw ConfigError("unknown precision '" + text + "': expected f32, tf32 or bf16");
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::f32:
      return "f32";
    case Precision::tf32:
      return "tf32";
    case Precision::bf16:
      return "bf16";
  }
  return "?";
}

void Context::set_precision(Precision precision) {
  precision_ = precision;
  // The handle's math mode serves cublasSgemm: TF32 under tf32. Under bf16,
  // cuda::gemm rounds the f32 operands to bf16 copies and calls cublasGemmEx
  // instead (BF16 products, f32 accumulation and result; see blas.cpp); the
  // TF32 mode stays for any other cuBLAS call.
  if (cuda_) cuda::set_tf32(*cuda_, precision != Precision::f32);
}

void Context::synchronize() {
  if (cuda_) cuda::synchronize(*cuda_);
}

void Context::join_branches() {
  if (cuda_) cuda::join_branches(*cuda_);
}

Context::DeferredJoins::DeferredJoins(Context& ctx) : ctx_(ctx) {
  if (ctx.cuda_) cuda::set_deferred_joins(*ctx.cuda_, true);
}

Context::DeferredJoins::~DeferredJoins() {
  if (!ctx_.cuda_) return;
  cuda::set_deferred_joins(*ctx_.cuda_, false);
  try {
    cuda::join_branches(*ctx_.cuda_);
  } catch (...) {
    // Unwinding or a failed stream: the next checked call on it reports the error.
  }
}

bool cuda_available() { return device_memory::cuda_device_count() > 0; }
bool built_with_cuda() { return device_memory::built_with_cuda(); }

}  // namespace plexus

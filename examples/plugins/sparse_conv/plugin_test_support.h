#pragma once
// What both test files of the plugin need: Plexus's built-in layers plus the
// built libsparse_conv.so, loaded once by its path the way plexus-ae loads
// it, and a skip for CUDA tests without a GPU or without the plugin's CUDA
// kernels.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/plugin.h"
#include "plexus/registry.h"
#include "plexus/testing/gtest_helpers.h"

inline const plexus::Registry& plugin_registry() {
  static const plexus::Registry registry = [] {
    plexus::Registry loaded = plexus::builtin_registry();
    plexus::load_plugin(SPARSE_CONV_PLUGIN, loaded);
    return loaded;
  }();
  return registry;
}

// A layer a test file is about, created once to ask whether it came with
// CUDA kernels (a pruned layer also needs libplexus's dense CUDA kernels).
struct CudaProbe {
  std::string type;
  nlohmann::json params;
};

inline bool plugin_has_cuda(const CudaProbe& probe) {
  return plugin_registry().create(probe.type, "probe", probe.params)->traits(plexus::Device::cuda()).has_cuda;
}

// A macro because GTEST_SKIP must return from the test body itself.
#define SKIP_WITHOUT_CUDA(probe)                                                \
  if (!plexus::cuda_available()) GTEST_SKIP() << plexus::testing::kNoGpuReason; \
  if (!plugin_has_cuda(probe)) GTEST_SKIP() << "the plugin was built without its CUDA kernels"

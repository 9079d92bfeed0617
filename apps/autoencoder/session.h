#pragma once
// What the commands set up first: the layer registry (built-in layers,
// then every --plugin and PLEXUS_PLUGIN_PATH entry), the device and the
// CPU kernels' threads.
#include <string>
#include <cstdint>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/registry.h"
#include "plexus/tensor.h"

namespace plexus::ae {

Registry make_registry(const std::vector<std::string>& plugins);
// "cpu", "cuda", "cuda:N" or "auto" (CUDA when a GPU is visible). Throws
// ConfigError for anything else and DeviceError for CUDA when this build or
// machine has none, both starting "--device: ".
Device choose_device(const std::string& text);
// --cpu-threads' upper bound: far more threads than any processor has cores
// only costs memory and time.
inline constexpr int kMaxCpuThreads = 1024;
// --cpu-threads: the threads the CPU kernels use (0: every core). Throws
// ConfigError outside [0, kMaxCpuThreads].
void use_cpu_threads(int threads);

// --max-image-pixels' upper bound, in every command (train's option table too).
inline constexpr std::int64_t kMaxImagePixelsOption = std::int64_t{1} << 40;
// --max-image-pixels on `command` (compress, decompress, eval), a whole number
// in [1, kMaxImagePixelsOption] shown as "PIXELS"; `help` says what the command does with it.
void add_max_image_pixels_option(CLI::App& command, std::int64_t& value, const std::string& help);

}  // namespace plexus::ae

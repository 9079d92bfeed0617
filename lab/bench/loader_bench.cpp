// plexus-loader-bench: how fast the CPU side of `plexus-ae train` can
// produce training batches, to compare with the step rate the GPU needs.
//   plexus-loader-bench --data FOLDER [--batch 16] [--patch 256]
//                       [--threads 1,2,4,8] [--seconds 3]
// First every image is decoded once (the loader's cache holds them, as it
// does after the first epoch of a run). Then, on one thread, CPU ms per
// batch (thread CPU time, so other load on the machine barely changes it):
//   fill_batch   PatchSampler::fill_batch: the crops as bytes into a buffer
//                reused every batch (what a loader thread does per batch)
//   make_batch   PatchSampler::make_batch: the same as a fresh f32 tensor
//   allocation   a fresh zeroed f32 tensor of one batch
//   memcpy       one f32 batch copied between two reused buffers
// and then, for each --threads count, BatchLoader::next_lease() as the
// training loop takes batches (a consumer that does nothing else): images/s,
// the process CPU ms, system CPU ms and page faults per batch. Prints one
// JSON object per line.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/data/batch_loader.h"
#include "plexus/data/image_folder.h"
#include "plexus/data/patch_sampler.h"
#include "plexus/error.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Runs `body` repeatedly for about `seconds`; this thread's CPU
// milliseconds per call.
template <typename Body>
double cpu_ms_per_call(double seconds, Body&& body) {
  body();  // warm-up
  int calls = 0;
  const auto start = Clock::now();
  const double cpu_start = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  do {
    body();
    ++calls;
  } while (seconds_since(start) < seconds);
  return 1000.0 * (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start) / calls;
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder;
  int batch = 16, patch = 256;
  double seconds = 3;
  std::vector<int> thread_counts{1, 2, 4, 8};
  CLI::App app{"plexus-loader-bench: training batches per second from an image folder"};
  app.add_option("--data", folder, "folder of training images")->required();
  app.add_option("--batch", batch, "patches per batch")->check(CLI::PositiveNumber);
  app.add_option("--patch", patch, "patch side in pixels")->check(CLI::PositiveNumber);
  app.add_option("--threads", thread_counts, "loader thread counts to measure")->delimiter(',');
  app.add_option("--seconds", seconds, "time per measurement")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    using namespace plexus::data;
    ImageFolder images(folder);
    const auto decode_start = Clock::now();
    for (std::size_t i = 0; i < images.size(); ++i) images.load(i);
    std::printf("{\"images\": %zu, \"decode_all_seconds\": %.3f}\n", images.size(), seconds_since(decode_start));

    const PatchSampler sampler(1, batch, patch);
    const std::size_t item = static_cast<std::size_t>(3) * patch * patch;
    const std::size_t batch_bytes = item * batch * sizeof(float);
    std::int64_t step = 0;
    std::vector<std::uint8_t> bytes(sampler.batch_elements());
    const double fill_batch_ms = cpu_ms_per_call(seconds, [&] { sampler.fill_batch(images, step++, bytes.data()); });
    const double make_batch_ms = cpu_ms_per_call(seconds, [&] { sampler.make_batch(images, step++); });
    const double allocation_ms = cpu_ms_per_call(seconds, [&] { plexus::Tensor t({batch, 3, patch, patch}); });
    std::vector<float> source(item * batch, 0.5f), target(item * batch);
    const double memcpy_ms = cpu_ms_per_call(seconds, [&] { std::memcpy(target.data(), source.data(), batch_bytes); });
    std::printf("{\"batch\": %d, \"patch\": %d, \"f32_batch_mb\": %.1f, \"fill_batch_cpu_ms\": %.3f, "
                "\"make_batch_cpu_ms\": %.3f, \"allocation_cpu_ms\": %.3f, \"memcpy_cpu_ms\": %.3f, "
                "\"images_per_cpu_second\": %.0f}\n",
                batch, patch, batch_bytes / 1e6, fill_batch_ms, make_batch_ms, allocation_ms, memcpy_ms,
                1000.0 * batch / fill_batch_ms);

    for (int threads : thread_counts) {
      BatchLoader loader(images, sampler, 0, threads, 2 * std::max(1, threads) + 1);
      for (int i = 0; i < 2 * threads + 2; ++i) loader.next_lease();  // fill the queue
      std::int64_t batches = 0;
      const auto start = Clock::now();
      const double cpu_start = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
      rusage usage_start{};
      getrusage(RUSAGE_SELF, &usage_start);
      do {
        loader.next_lease();
        ++batches;
      } while (seconds_since(start) < seconds);
      const double wall = seconds_since(start);
      const double cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      const double system_seconds = static_cast<double>(usage.ru_stime.tv_sec - usage_start.ru_stime.tv_sec) +
                                    1e-6 * static_cast<double>(usage.ru_stime.tv_usec - usage_start.ru_stime.tv_usec);
      // System time and page faults show what allocation costs in the kernel.
      std::printf("{\"threads\": %d, \"images_per_second\": %.0f, \"process_cpu_ms_per_batch\": %.3f, "
                  "\"system_cpu_ms_per_batch\": %.3f, \"page_faults_per_batch\": %.0f}\n",
                  threads, batches * batch / wall, 1000.0 * cpu / batches, 1000.0 * system_seconds / batches,
                  static_cast<double>(usage.ru_minflt - usage_start.ru_minflt) / batches);
    }
  } catch (const plexus::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

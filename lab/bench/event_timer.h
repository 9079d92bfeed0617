#pragma once
// Median GPU time of a piece of work on a context's stream, by CUDA events:
// `warmup` untimed calls, then the median of `repeats` timed ones. Shared by
// the benchmark tools in this folder.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "plexus/context.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::bench {

class EventTimer {
 public:
  EventTimer() {
    cuda::check_cuda(cudaEventCreate(&start_), "cudaEventCreate", __FILE__, __LINE__);
    cuda::check_cuda(cudaEventCreate(&stop_), "cudaEventCreate", __FILE__, __LINE__);
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Median milliseconds of `repeats` timed calls of fn after `warmup` untimed ones.
  template <typename Fn>
  double median_ms(Context& ctx, int warmup, int repeats, Fn&& fn) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      cuda::check_cuda(cudaEventRecord(start_, cuda::stream(ctx)), "cudaEventRecord", __FILE__, __LINE__);
      fn();
      cuda::check_cuda(cudaEventRecord(stop_, cuda::stream(ctx)), "cudaEventRecord", __FILE__, __LINE__);
      cuda::check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize", __FILE__, __LINE__);
      float ms = 0;
      cuda::check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", __FILE__, __LINE__);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

}  // namespace plexus::bench

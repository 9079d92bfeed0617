#pragma once
// BatchLoader: PatchSampler batches built ahead of time on background
// threads, so decoding and cropping overlap the training step. At most
// `prefetch` batches wait in memory; next() hands them out in step order.
// Because a batch depends only on (seed, step), the result is the same for
// any number of threads.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "plexus/data/image_folder.h"
#include "plexus/data/patch_sampler.h"

namespace plexus::data {

class BatchLoader {
 public:
  // Batches start at `first_step`. threads == 0 builds each batch inside
  // next() instead (no background threads). Throws ConfigError for
  // threads < 0 or prefetch < 1, Error (with every started thread joined)
  // when a thread cannot be created.
  BatchLoader(ImageFolder& images, PatchSampler sampler, std::int64_t first_step, int threads = 2,
              int prefetch = 4);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The batch of the next step; rethrows an error a worker met building it.
  Tensor next();
  std::int64_t next_step() const { return next_step_; }

 private:
  void work();
  void stop_workers();
  ImageFolder& images_;
  PatchSampler sampler_;
  std::int64_t next_step_;      // the step next() returns
  std::int64_t next_claim_;     // the next step a worker takes
  int prefetch_;
  bool stopping_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Result {
    Tensor batch;
    std::exception_ptr error;
  };
  std::map<std::int64_t, Result> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace plexus::data

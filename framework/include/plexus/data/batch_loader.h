#pragma once
// BatchLoader: PatchSampler batches built ahead of time on background
// threads, so decoding and cropping overlap the training step. Because a
// batch depends only on (seed, step), the result is the same for any number
// of threads.
//
// Batches are built as 8-bit values straight into a ring of `prefetch`
// buffers allocated once (page-locked when they are bound for a GPU), so
// building a batch allocates nothing and the consumer copies it from where
// it was built: batch k lives in buffer k mod prefetch from the moment a
// worker claims it until the consumer drops its Lease.
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
  // Batch `step`'s 8-bit values ([batch, 3, patch, patch]) in one of the
  // loader's buffers; the buffer takes a later batch once the lease is gone.
  // A lease must not outlive its loader.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    bool held() const { return owner_ != nullptr; }
    std::int64_t step() const { return step_; }
    const std::uint8_t* bytes() const { return bytes_; }
    std::size_t size() const { return size_; }
    void release();

   private:
    friend class BatchLoader;
    Lease(BatchLoader* owner, std::int64_t step, const std::uint8_t* bytes, std::size_t size)
        : owner_(owner), step_(step), bytes_(bytes), size_(size) {}
    BatchLoader* owner_ = nullptr;
    std::int64_t step_ = 0;
    const std::uint8_t* bytes_ = nullptr;
    std::size_t size_ = 0;
  };

  // Batches start at `first_step`. threads == 0 builds each batch inside
  // next_lease() instead (no background threads). `destination`: the device
  // the batches will be copied to (their buffers are page-locked for a GPU).
  // Throws ConfigError for threads < 0 or prefetch < 1, Error (with every
  // started thread joined) when a thread cannot be created.
  BatchLoader(ImageFolder& images, PatchSampler sampler, std::int64_t first_step, int threads = 2, int prefetch = 4,
              Device destination = Device::cpu());
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The batch of the next step, in place; rethrows an error a worker met
  // building it. Throws Error when all `prefetch` buffers are already leased
  // (the caller must drop a lease first: waiting would never end).
  Lease next_lease();
  // The batch of the next step as f32 values v / 255 on the CPU (a copy).
  Tensor next();
  std::int64_t next_step() const { return next_step_; }
  const PatchSampler& sampler() const { return sampler_; }
  // [batch, 3, patch, patch]
  Shape batch_shape() const;

 private:
  void work();
  void stop_workers();
  void release(std::int64_t step);
  std::size_t buffer_index(std::int64_t step) const { return static_cast<std::size_t>(step % prefetch_); }
  ImageFolder& images_;
  PatchSampler sampler_;
  Device destination_;
  std::int64_t next_step_;   // the step next_lease() returns
  std::int64_t next_claim_;  // the next step a worker takes
  int prefetch_;
  bool stopping_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::uint8_t*> buffers_;
  std::vector<std::int64_t> occupant_;                // by buffer: the step claimed into it, or -1 when free
  std::map<std::int64_t, std::exception_ptr> built_;  // steps built (with the error, if any), not yet leased
  std::vector<std::thread> workers_;
};

}  // namespace plexus::data

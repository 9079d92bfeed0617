#include "plexus/data/batch_loader.h"

#include <system_error>

#include "../backend.h"
#include "plexus/error.h"

namespace plexus::data {

namespace {
constexpr std::int64_t kFree = -1;
}  // namespace

BatchLoader::Lease::Lease(Lease&& other) noexcept
    : owner_(other.owner_), step_(other.step_), bytes_(other.bytes_), size_(other.size_) {
  other.owner_ = nullptr;
}

BatchLoader::Lease& BatchLoader::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = other.owner_;
    step_ = other.step_;
    bytes_ = other.bytes_;
    size_ = other.size_;
    other.owner_ = nullptr;
  }
  return *this;
}

BatchLoader::Lease::~Lease() { release(); }

void BatchLoader::Lease::release() {
  if (!owner_) return;
  owner_->release(step_);
  owner_ = nullptr;
}

BatchLoader::BatchLoader(ImageFolder& images, PatchSampler sampler, std::int64_t first_step, int threads, int prefetch,
                         Device destination)
    : images_(images),
      sampler_(sampler),
      destination_(destination),
      next_step_(first_step),
      next_claim_(first_step),
      prefetch_(prefetch) {
  if (threads < 0) throw ConfigError("the number of loader threads must be >= 0, got " + std::to_string(threads));
  if (prefetch < 1) throw ConfigError("the prefetch depth must be >= 1, got " + std::to_string(prefetch));
  try {
    for (int i = 0; i < prefetch; ++i)
      buffers_.push_back(
          static_cast<std::uint8_t*>(device_memory::allocate_host_staging(sampler_.batch_elements(), destination_)));
  } catch (...) {
    for (std::uint8_t* buffer : buffers_) device_memory::release_host_staging(buffer, destination_);
    throw;
  }
  occupant_.assign(buffers_.size(), kFree);
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a constructor that throws: the threads
    // already started must be stopped and joined here.
    const std::size_t started = workers_.size();
    stop_workers();
    for (std::uint8_t* buffer : buffers_) device_memory::release_host_staging(buffer, destination_);
    throw Error("cannot start loader thread " + std::to_string(started + 1) + " of " + std::to_string(threads) + ": " +
                e.what() + " (use fewer --threads, or raise the process limit)");
  }
}

BatchLoader::~BatchLoader() {
  stop_workers();
  for (std::uint8_t* buffer : buffers_) device_memory::release_host_staging(buffer, destination_);
}

Shape BatchLoader::batch_shape() const { return {sampler_.batch(), 3, sampler_.patch(), sampler_.patch()}; }

void BatchLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

// Each worker claims the lowest step not yet claimed as soon as its buffer
// is free (the batch `prefetch` steps earlier was released), and builds it
// there.
void BatchLoader::work() {
  for (;;) {
    std::int64_t step = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || occupant_[buffer_index(next_claim_)] == kFree; });
      if (stopping_) return;
      step = next_claim_++;
      occupant_[buffer_index(step)] = step;
    }
    std::exception_ptr error;
    try {
      sampler_.fill_batch(images_, step, buffers_[buffer_index(step)]);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      built_[step] = error;
    }
    changed_.notify_all();
  }
}

void BatchLoader::release(std::int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    occupant_[buffer_index(step)] = kFree;
  }
  changed_.notify_all();
}

BatchLoader::Lease BatchLoader::next_lease() {
  const std::int64_t step = next_step_;
  const std::size_t buffer = buffer_index(step);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::int64_t occupant = occupant_[buffer];
    if (occupant != kFree && occupant < step)
      throw Error("BatchLoader: all " + std::to_string(prefetch_) + " batch buffers are leased (batch " +
                  std::to_string(occupant) + " still holds the one batch " + std::to_string(step) +
                  " needs); release a lease first");
    if (workers_.empty()) {
      occupant_[buffer] = step;
    } else {
      changed_.wait(lock, [&] { return built_.count(step) > 0; });
      auto it = built_.find(step);
      error = it->second;
      built_.erase(it);
    }
  }
  if (workers_.empty()) {
    try {
      sampler_.fill_batch(images_, step, buffers_[buffer]);
    } catch (...) {
      error = std::current_exception();
    }
  }
  ++next_step_;
  Lease lease(this, step, buffers_[buffer], sampler_.batch_elements());
  if (error) std::rethrow_exception(error);  // the lease's destructor frees the buffer
  return lease;
}

Tensor BatchLoader::next() {
  Lease lease = next_lease();
  Tensor batch(batch_shape());
  bytes_to_unit(lease.bytes(), batch.data<float>(), lease.size());
  return batch;
}

}  // namespace plexus::data

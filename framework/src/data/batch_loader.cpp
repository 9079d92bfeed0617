#include "plexus/data/batch_loader.h"

#include <system_error>

#include "plexus/error.h"

namespace plexus::data {

BatchLoader::BatchLoader(ImageFolder& images, PatchSampler sampler, std::int64_t first_step, int threads,
                         int prefetch)
    : images_(images), sampler_(sampler), next_step_(first_step), next_claim_(first_step), prefetch_(prefetch) {
  if (threads < 0) throw ConfigError("the number of loader threads must be >= 0, got " + std::to_string(threads));
  if (prefetch < 1) throw ConfigError("the prefetch depth must be >= 1, got " + std::to_string(prefetch));
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a constructor that throws: the threads
    // already started must be stopped and joined here.
    const std::size_t started = workers_.size();
    stop_workers();
    throw Error("cannot start loader thread " + std::to_string(started + 1) + " of " + std::to_string(threads) +
                ": " + e.what() + " (use fewer --threads, or raise the process limit)");
  }
}

BatchLoader::~BatchLoader() { stop_workers(); }

void BatchLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

// Each worker claims the lowest step not yet claimed, as long as fewer than
// `prefetch` steps are claimed ahead of the consumer, and builds it.
void BatchLoader::work() {
  for (;;) {
    std::int64_t step = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || next_claim_ < next_step_ + prefetch_; });
      if (stopping_) return;
      step = next_claim_++;
    }
    Result result;
    try {
      result.batch = sampler_.make_batch(images_, step);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_[step] = std::move(result);
    }
    changed_.notify_all();
  }
}

Tensor BatchLoader::next() {
  if (workers_.empty()) {
    Tensor batch = sampler_.make_batch(images_, next_step_);
    ++next_step_;
    return batch;
  }
  Result result;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_.count(next_step_) > 0; });
    auto it = ready_.find(next_step_);
    result = std::move(it->second);
    ready_.erase(it);
    ++next_step_;
  }
  changed_.notify_all();
  if (result.error) std::rethrow_exception(result.error);
  return result.batch;
}

}  // namespace plexus::data

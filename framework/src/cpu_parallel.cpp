#include "plexus/cpu_parallel.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace plexus {

namespace {
std::atomic<int> requested_threads{0};

// Whether this thread is running a parallel_for's chunk: a nested call runs serially.
thread_local bool inside_parallel_for = false;

// Workers that sleep on a condition variable between calls. OpenMP's default
// wait spins for a while after each parallel loop, and that spinning is CPU
// time: about a tenth of a second per 768x512 image coded on two threads.
class ThreadPool {
 public:
  // Never destroyed: its workers sleep until the process ends, so nothing
  // joins them at exit, nor in a forked child, which has none of them.
  static ThreadPool& instance() {
    static ThreadPool* pool = new ThreadPool;
    return *pool;
  }

  // Runs chunk(k) for k in [0, chunks): chunk 0 on the calling thread, the
  // others on workers. False (nothing run) while another thread's call runs,
  // or in a process forked from the one that started the workers.
  bool run(int chunks, const std::function<void(int)>& chunk) {
    if (getpid() != owner_) return false;
    std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
    if (!call.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < chunks - 1) {
        const int index = static_cast<int>(workers_.size()) + 1;
        workers_.emplace_back([this, index] { work(index); });
      }
      job_ = &chunk;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    wake_.notify_all();
    chunk(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  void work(int index) {
    inside_parallel_for = true;
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= chunks_) continue;
      const std::function<void(int)>& job = *job_;
      lock.unlock();
      job(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const pid_t owner_ = getpid();  // the process whose threads the workers are
  std::mutex call_mutex_;         // one call at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
};
}  // namespace

void set_cpu_threads(int threads) { requested_threads = threads < 0 ? 0 : threads; }

int cpu_threads() {
  const int requested = requested_threads;
  if (requested > 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  const int threads = static_cast<int>(std::min<std::int64_t>(cpu_threads(), count));
  if (threads <= 1 || inside_parallel_for) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  // A static schedule, as OpenMP's: chunk k is the k-th of `threads` contiguous
  // runs of items, the first count % threads of them one item longer.
  const std::int64_t share = count / threads, longer = count % threads;
  const auto chunk = [&](int k) {
    const bool was_inside = inside_parallel_for;
    inside_parallel_for = true;
    const std::int64_t first = k * share + std::min<std::int64_t>(k, longer);
    const std::int64_t end = first + share + (k < longer ? 1 : 0);
    for (std::int64_t i = first; i < end; ++i) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
    inside_parallel_for = was_inside;
  };
  if (!ThreadPool::instance().run(threads, chunk))
    for (int k = 0; k < threads; ++k) chunk(k);  // another thread's call holds the pool
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace plexus

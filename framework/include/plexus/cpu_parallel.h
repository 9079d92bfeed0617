#pragma once
// Parallelism of the CPU kernels: independent items (images of a batch,
// channels, fixed-size blocks of rows or pixels of an image) spread over a
// pool of threads.
//
// Determinism: every item is computed by exactly one thread with the same
// arithmetic whatever the thread count, and sums over items (parameter
// gradients summed over a batch) are taken afterwards in item order
// (add_in_order), so results are bit-identical for 1 and N threads.
#include <cstdint>
#include <functional>

namespace plexus {

// Threads the CPU kernels use; 0 (the default) means every core.
void set_cpu_threads(int threads);
// The effective count (>= 1).
int cpu_threads();

// Calls body(i) for every i in [0, count), on up to cpu_threads() threads.
// body(i) may write only what belongs to item i. The first exception thrown
// by any item is rethrown after all threads finish.
void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body);

// total[j] += sum over i in [0, count) of parts[i * size + j], adding the
// parts in order i = 0, 1, ... (the order a serial loop would use).
template <typename T>
void add_in_order(const T* parts, std::int64_t count, std::int64_t size, T* total) {
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t j = 0; j < size; ++j) total[j] += parts[i * size + j];
}

}  // namespace plexus

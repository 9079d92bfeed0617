// CUDA gradient-norm clipping (formula in plexus/grad_clip.h): per gradient, a
// fixed grid of blocks writes partial sums of squares; one block adds them in
// order and computes the norm and factor; each gradient is scaled by the
// factor read from device memory. No host synchronisation, same result every run.
// The gradients go to each kernel as a table passed by value (up to
// kTensorsPerLaunch at a time), so a model's few dozen small gradients cost
// three launches, not two per gradient: inside a replayed training step the
// launches, not the arithmetic, were what clipping cost.
#include <algorithm>

#include "../grad_clip_kernels.h"
#include "plexus/cuda/block_reduce.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/layer.h"

namespace plexus::cuda {

namespace {

constexpr int kThreads = 256;

constexpr int kTensorsPerLaunch = 32;

// Gradients of one dtype; partials of gradient `first + t` start at
// (first + t) * kClipPartialBlocks.
template <typename T>
struct GradientTable {
  T* data[kTensorsPerLaunch];
  long long size[kTensorsPerLaunch];
  int first;
  int count;
};

// Block (b, t): partials[(first + t) * kClipPartialBlocks + b] = sum of g[i]^2
// over gradient t's elements i = b * blockDim.x + threadIdx.x + k *
// kClipPartialBlocks * blockDim.x: per gradient the same blocks and order as
// a launch of kClipPartialBlocks blocks on that gradient alone.
template <typename T>
__global__ void sum_squares_kernel(GradientTable<T> table, double* partials) {
  const T* g = table.data[blockIdx.y];
  const long long n = table.size[blockIdx.y];
  double sum = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    sum += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  sum = block_sum<kThreads>(sum);  // valid in thread 0
  if (threadIdx.x == 0) partials[(table.first + blockIdx.y) * kClipPartialBlocks + blockIdx.x] = sum;
}

// result[0] = sqrt(sum of partials); result[1] = min(1, max_norm / (result[0] + 1e-6)).
__global__ void clip_factor_kernel(const double* partials, int count, double max_norm, double* result) {
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum<kThreads>(sum);
  if (threadIdx.x == 0) {
    const double norm = sqrt(sum);
    result[0] = norm;
    result[1] = fmin(1.0, max_norm / (norm + 1e-6));
  }
}

// Blocks (., t): gradient t *= result[1]
template <typename T>
__global__ void scale_kernel(GradientTable<T> table, const double* result) {
  const double factor = result[1];
  if (factor >= 1.0) return;
  T* g = table.data[blockIdx.y];
  const long long n = table.size[blockIdx.y];
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    g[i] = static_cast<T>(g[i] * factor);
}

// Calls launch(table) for the gradients of dtype T among `grads`, at most
// kTensorsPerLaunch per table, keeping each gradient's index in `grads`.
template <typename T, typename Launch>
void for_each_table(const std::vector<Tensor*>& grads, Launch&& launch) {
  GradientTable<T> table{};
  auto flush = [&] {
    if (table.count > 0) launch(table);
    table.count = 0;
  };
  for (std::size_t k = 0; k < grads.size(); ++k) {
    if (grads[k]->dtype() != dtype_of<T>()) continue;
    // One table holds consecutive gradients only: partials are indexed from `first`.
    if (table.count == kTensorsPerLaunch || (table.count > 0 && table.first + table.count != static_cast<int>(k)))
      flush();
    if (table.count == 0) table.first = static_cast<int>(k);
    table.data[table.count] = grads[k]->data<T>();
    table.size[table.count] = grads[k]->numel();
    ++table.count;
  }
  flush();
}

}  // namespace

void clip_gradients(Context& ctx, const std::vector<Tensor*>& grads, double max_norm, Tensor& partials,
                    Tensor& result) {
  double* partial_data = partials.data<double>();
  auto sum_squares = [&](auto zero) {
    using T = decltype(zero);
    for_each_table<T>(grads, [&](const GradientTable<T>& table) {
      // A fixed grid (not sized by n) so the summation order never changes.
      sum_squares_kernel<T><<<dim3(kClipPartialBlocks, table.count), kThreads, 0, stream(ctx)>>>(table, partial_data);
      check_launch("sum_squares_kernel", __FILE__, __LINE__);
    });
  };
  sum_squares(float{});
  sum_squares(double{});
  // One block: the partials are few (64 per parameter tensor).
  clip_factor_kernel<<<1, kThreads, 0, stream(ctx)>>>(partial_data, static_cast<int>(grads.size()) * kClipPartialBlocks,
                                                      max_norm, result.data<double>());
  check_launch("clip_factor_kernel", __FILE__, __LINE__);
  auto scale = [&](auto zero) {
    using T = decltype(zero);
    for_each_table<T>(grads, [&](const GradientTable<T>& table) {
      long long largest = 1;
      for (int t = 0; t < table.count; ++t) largest = std::max(largest, table.size[t]);
      // At most 256 blocks per gradient (most are small); the loop strides over the rest.
      const unsigned blocks = std::min(blocks_for(largest), 256u);
      scale_kernel<T><<<dim3(blocks, table.count), kThreads, 0, stream(ctx)>>>(table, result.data<double>());
      check_launch("scale_kernel", __FILE__, __LINE__);
    });
  };
  scale(float{});
  scale(double{});
}

}  // namespace plexus::cuda

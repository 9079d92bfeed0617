#pragma once
// Broadcasting in the element-wise layers of several inputs (Add, Mul).
//
// The rule (NumPy's, for inputs of one rank): every input has the rank of
// the output; in each dimension an input's size is the output's or 1, and
// the output's is the size other than 1 among the inputs (1 where they all
// have 1). An input of size 1 in a dimension is repeated along it: with
// i_x the index i of y with each such coordinate set to 0,
//   forward   y[i] = f(a[i_a], b[i_b])
//   backward  dL/da[j] = sum over the i with i_a = j of dL/dy[i] df/da(a[j], b[i_b])
// (and alike for b): the gradient of a broadcast input is dL/dy's sum over
// the dimensions it is broadcast along. Inputs of one shape never come here:
// the layers keep their plain element-wise passes for them.
//
// The passes walk the output through IndexWalks, row-major walks over a few
// dimensions that give, for each index, the offsets of the element it names
// in two tensors (stride 0 along a broadcast dimension). Neighbouring
// dimensions that every tensor steps through alike are merged into one, so
// that channel gating of [N, C, H, W] by [N, C, 1, 1] walks [N*C, H*W].
// The CPU loops are below; the CUDA kernels, under __CUDACC__, at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/tensor.h"

#ifdef __CUDACC__
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#endif

#ifdef __CUDACC__
#define PLEXUS_BROADCAST_FUNCTION __host__ __device__ inline
#else
#define PLEXUS_BROADCAST_FUNCTION inline
#endif

namespace plexus::layers::broadcast {

// Broadcasting takes inputs of at most this rank (the walks' fixed arrays,
// which a CUDA kernel takes by value).
constexpr int kMaxRank = 8;

// The output shape of `inputs` broadcast together, or, when they do not
// broadcast, `error` naming the two inputs that conflict ("input 2 is
// [2, 3, 5] but input 1 is [2, 3, 4]") and an empty shape.
struct BroadcastShape {
  Shape shape;
  std::string error;  // empty when the inputs broadcast
};

inline BroadcastShape broadcast_shape(const std::vector<Shape>& inputs) {
  const auto conflict = [&](std::size_t k, std::size_t j) {
    return BroadcastShape{{},
                          "input " + std::to_string(k) + " is " + shape_str(inputs[k]) + " but input " +
                              std::to_string(j) + " is " + shape_str(inputs[j])};
  };
  Shape shape = inputs.at(0);
  std::vector<std::size_t> set_by(shape.size(), 0);  // the input each output size comes from
  for (std::size_t k = 1; k < inputs.size(); ++k) {
    if (inputs[k].size() != shape.size()) return conflict(k, 0);
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t size = inputs[k][d];
      if (size == shape[d] || size == 1) continue;
      if (shape[d] != 1) return conflict(k, set_by[d]);
      shape[d] = size;
      set_by[d] = k;
    }
  }
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] != shape && shape.size() > static_cast<std::size_t>(kMaxRank))
      return {{},
              "input " + std::to_string(k) + " is " + shape_str(inputs[k]) + ", broadcast to " + shape_str(shape) +
                  ": broadcasting takes at most " + std::to_string(kMaxRank) + " dimensions"};
  return {shape, ""};
}

// A row-major walk over `sizes`: index i names the element at
// sum_d coordinate_d * first_strides[d] of a first tensor, and at
// sum_d coordinate_d * second_strides[d] of a second.
struct IndexWalk {
  int dims = 0;
  long long sizes[kMaxRank] = {};
  long long first_strides[kMaxRank] = {};
  long long second_strides[kMaxRank] = {};

  PLEXUS_BROADCAST_FUNCTION long long count() const {
    long long n = 1;
    for (int d = 0; d < dims; ++d) n *= sizes[d];
    return n;
  }
  // In Index arithmetic: the CUDA kernels take 32 bits where every offset
  // fits (a 64-bit division costs several times a 32-bit one). The outermost
  // coordinate is what is left of the index, with no division.
  template <typename Index>
  PLEXUS_BROADCAST_FUNCTION void offsets(Index index, Index& first, Index& second) const {
    first = 0;
    second = 0;
    for (int d = dims - 1; d > 0; --d) {
      const Index size = static_cast<Index>(sizes[d]);
      const Index coordinate = index % size;
      index /= size;
      first += coordinate * static_cast<Index>(first_strides[d]);
      second += coordinate * static_cast<Index>(second_strides[d]);
    }
    if (dims > 0) {
      first += index * static_cast<Index>(first_strides[0]);
      second += index * static_cast<Index>(second_strides[0]);
    }
  }

  // Appends a dimension inside the others (dimensions of size 1 are left
  // out), merged into the last one where both tensors step through the two
  // as through one: outer stride = inner stride * inner size.
  void append(long long size, long long first_stride, long long second_stride) {
    if (size == 1) return;
    const int last = dims - 1;
    if (last >= 0 && first_strides[last] == first_stride * size && second_strides[last] == second_stride * size) {
      sizes[last] *= size;
      first_strides[last] = first_stride;
      second_strides[last] = second_stride;
      return;
    }
    sizes[dims] = size;
    first_strides[dims] = first_stride;
    second_strides[dims] = second_stride;
    ++dims;
  }
};

// The stride of each dimension of `shape` (row-major), 0 where the tensor
// is broadcast along it (size 1 in an output of `output` sizes).
inline std::vector<long long> broadcast_strides(const Shape& shape, const Shape& output) {
  std::vector<long long> strides(shape.size());
  long long stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = shape[d] == 1 && output[d] != 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

// y = f(a, b): the walk over y's elements, giving the offsets in a and b.
inline IndexWalk forward_walk(const Shape& a, const Shape& b, const Shape& y) {
  const std::vector<long long> a_strides = broadcast_strides(a, y), b_strides = broadcast_strides(b, y);
  IndexWalk walk;
  for (std::size_t d = 0; d < y.size(); ++d) walk.append(y[d], a_strides[d], b_strides[d]);
  return walk;
}

// The gradient of an input x, whose other input is `other` (Add: any), as
// a sum: dL/dx[j] = sum over r of term(j, y offset, other offset), with the
// offsets those of kept's index j plus those of reduced's index r.
struct ReductionWalk {
  IndexWalk kept;     // over x's elements (index j: x's own, row-major), offsets in y and other
  IndexWalk reduced;  // over the dimensions x is broadcast along, offsets in y and other
};

inline ReductionWalk reduction_walk(const Shape& x, const Shape& other, const Shape& y) {
  const std::vector<long long> y_strides = broadcast_strides(y, y), other_strides = broadcast_strides(other, y);
  ReductionWalk walk;
  for (std::size_t d = 0; d < y.size(); ++d)
    (x[d] == y[d] ? walk.kept : walk.reduced).append(y[d], y_strides[d], other_strides[d]);
  return walk;
}

// ---- CPU ----

// fn(first offset, second offset) at every index of `walk`, in order; the
// innermost dimension as a plain loop.
template <typename Fn>
void for_each_offset(const IndexWalk& walk, Fn&& fn) {
  if (walk.dims == 0) {
    fn(0LL, 0LL);
    return;
  }
  const int inner = walk.dims - 1;
  const long long size = walk.sizes[inner], first_stride = walk.first_strides[inner],
                  second_stride = walk.second_strides[inner];
  if (size == 0) return;  // an empty tensor
  const long long rows = walk.count() / size;
  for (long long row = 0; row < rows; ++row) {
    long long first, second;
    walk.offsets(row * size, first, second);
    for (long long k = 0; k < size; ++k) fn(first + k * first_stride, second + k * second_stride);
  }
}

// y[i] = fn(a[i_a], b[i_b]) over y's elements; y may be a itself.
template <typename T, typename Fn>
void forward_cpu(const T* a, const T* b, T* y, const IndexWalk& walk, Fn&& fn) {
  long long i = 0;
  for_each_offset(walk, [&](long long a_offset, long long b_offset) { y[i++] = fn(a[a_offset], b[b_offset]); });
}

// dx[j] = sum_r term(j, y offset, other offset), summed in r's order.
template <typename T, typename Term>
void reduce_cpu(T* dx, const ReductionWalk& walk, Term&& term) {
  const long long kept = walk.kept.count();
  for (long long j = 0; j < kept; ++j) {
    long long y_base, other_base;
    walk.kept.offsets(j, y_base, other_base);
    T sum = 0;
    for_each_offset(walk.reduced, [&](long long y_offset, long long other_offset) {
      sum += term(j, y_base + y_offset, other_base + other_offset);
    });
    dx[j] = sum;
  }
}

// ---- CUDA ----
#ifdef __CUDACC__

// y[i] = fn(a[i_a], b[i_b]): one thread per element of y, grid-stride so
// any size fits the capped grid; y may be a itself.
template <typename Index, typename Fn, typename Elements>
__global__ void forward_kernel(Fn fn, Elements a, Elements b, Elements y, IndexWalk walk, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    Index a_offset, b_offset;
    walk.offsets(static_cast<Index>(i), a_offset, b_offset);
    y.store(i, fn(a.load(a_offset), b.load(b_offset)));
  }
}

// dx[j] = sum_r term(j, y offset, other offset), one thread per element of
// dx, each summing its r in order: used where y's innermost dimension is
// one of x's own, so that neighbouring threads read neighbouring elements
// (spatial gating: [N, 1, H, W] sums over C).
template <typename Index, typename Term, typename Elements>
__global__ void reduce_per_thread(Term term, Elements dx, ReductionWalk walk, long long kept, long long reduced) {
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < kept;
       j += (long long)gridDim.x * blockDim.x) {
    Index y_base, other_base;
    walk.kept.offsets(static_cast<Index>(j), y_base, other_base);
    typename Elements::Value sum = 0;
    for (long long r = 0; r < reduced; ++r) {
      Index y_offset, other_offset;
      walk.reduced.offsets(static_cast<Index>(r), y_offset, other_offset);
      sum += term(j, y_base + y_offset, other_base + other_offset);
    }
    dx.store(j, sum);
  }
}

constexpr int kReduceThreads = 256;

// dx[j] = sum_r term(j, y offset, other offset), one block per element of
// dx: used where x is broadcast along y's innermost dimension, so that a
// block's threads read neighbouring elements (channel gating: [N, C, 1, 1]
// sums over H*W). Thread t sums r = t, t + 256, ... in order, then a tree in
// shared memory adds the 256 partial sums: a fixed order, so a replay gives
// the same bits (no atomics).
template <typename Index, typename Term, typename Elements>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_per_block(Term term, Elements dx, ReductionWalk walk, long long kept, long long reduced) {
  using Value = typename Elements::Value;
  __shared__ Value partial[kReduceThreads];
  for (long long j = blockIdx.x; j < kept; j += gridDim.x) {
    Index y_base, other_base;
    walk.kept.offsets(static_cast<Index>(j), y_base, other_base);
    Value sum = 0;
    for (long long r = threadIdx.x; r < reduced; r += kReduceThreads) {
      Index y_offset, other_offset;
      walk.reduced.offsets(static_cast<Index>(r), y_offset, other_offset);
      sum += term(j, y_base + y_offset, other_base + other_offset);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = kReduceThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) dx.store(j, partial[0]);
    __syncthreads();  // partial[0] is read before the next j overwrites it
  }
}

// Whether every index and offset into tensors of at most n elements fits an unsigned int.
inline bool fits_32_bits(long long n) { return n <= 0xffffffffLL; }

// y = fn(a, b) broadcast, on `stream`.
template <typename Fn, typename Elements>
void forward_cuda(const Fn& fn, Elements a, Elements b, Elements y, const IndexWalk& walk, cudaStream_t stream) {
  const long long n = walk.count();
  if (n == 0) return;
  if (fits_32_bits(n)) forward_kernel<unsigned int><<<cuda::blocks_for(n), 256, 0, stream>>>(fn, a, b, y, walk, n);
  else forward_kernel<long long><<<cuda::blocks_for(n), 256, 0, stream>>>(fn, a, b, y, walk, n);
  cuda::check_launch("broadcast forward", __FILE__, __LINE__);
}

// dx[j] = sum_r term(j, y offset, other offset), on `stream`; a block per
// element of dx where x is broadcast along y's innermost dimension and the
// sums are long enough to fill one, else a thread per element.
template <typename Term, typename Elements>
void reduce_cuda(const Term& term, Elements dx, const ReductionWalk& walk, cudaStream_t stream) {
  const long long kept = walk.kept.count(), reduced = walk.reduced.count();
  if (kept == 0) return;
  const IndexWalk& sums = walk.reduced;
  const bool innermost_summed = sums.dims > 0 && sums.first_strides[sums.dims - 1] == 1;
  const bool narrow = fits_32_bits(kept * reduced);  // y's elements
  if (innermost_summed && reduced >= 32) {
    const unsigned int blocks = static_cast<unsigned int>(kept < 65536 ? kept : 65536);
    if (narrow) reduce_per_block<unsigned int><<<blocks, kReduceThreads, 0, stream>>>(term, dx, walk, kept, reduced);
    else reduce_per_block<long long><<<blocks, kReduceThreads, 0, stream>>>(term, dx, walk, kept, reduced);
  } else {
    const unsigned int blocks = cuda::blocks_for(kept);
    if (narrow) reduce_per_thread<unsigned int><<<blocks, 256, 0, stream>>>(term, dx, walk, kept, reduced);
    else reduce_per_thread<long long><<<blocks, 256, 0, stream>>>(term, dx, walk, kept, reduced);
  }
  cuda::check_launch("broadcast reduction", __FILE__, __LINE__);
}

#endif  // __CUDACC__

}  // namespace plexus::layers::broadcast

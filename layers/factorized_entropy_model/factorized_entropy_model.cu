// CUDA kernels of FactorizedEntropyModel (math and notation in
// factorized_entropy_model.h; Ballé et al. 2018, appendix 6.1).
//
// Launch layout of both kernels: blockIdx.y walks the channels and the
// threads of blockIdx.x grid-stride over that channel's N * inner elements,
// one thread per element. A block thus serves one channel at a time, so its
// 43 transformed parameters are staged once in shared memory, and in the
// backward pass every thread sums that one channel's parameter gradients in
// registers, the block reduces them in shared memory and adds them with one
// atomicAdd per parameter per block.
#include <algorithm>

#include "factorized_entropy_model/factorized_entropy_model.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBackwardBlocks = 2;  // f32 backward blocks per multiprocessor (registers)

// One channel's parameters packed into 43 values, as the chain uses them:
// H^(k) = softplus(matrix_k) row-major [out_k, in_k], then b^(k), then
// a^(k) = tanh(factor_k). Widths 1 -> 3 -> 3 -> 3 -> 1. The gradients a
// thread accumulates (dL/dH, dL/db, dL/da) use the same layout.
constexpr int kH0 = 0, kH1 = 3, kH2 = 12, kH3 = 21;
constexpr int kB0 = 24, kB1 = 27, kB2 = 30, kB3 = 33;
constexpr int kA0 = 34, kA1 = 37, kA2 = 40;
constexpr int kPacked = 43;
static_assert(FactorizedEntropyModel::kWidths[0] == 1 && FactorizedEntropyModel::kWidths[1] == 3 &&
                  FactorizedEntropyModel::kWidths[2] == 3 && FactorizedEntropyModel::kWidths[3] == 3 &&
                  FactorizedEntropyModel::kWidths[4] == 1,
              "the packed layout below assumes widths 1 -> 3 -> 3 -> 3 -> 1");

// The raw parameter tensors: matrix_k [C, out_k, in_k], bias_k and factor_k [C, out_k, 1].
template <typename T>
struct DensityParameters {
  const T* matrix[4];
  const T* bias[4];
  const T* factor[3];
};

template <typename T>
struct DensityGradients {
  T* matrix[4];
  T* bias[4];
  T* factor[3];
};

// Where packed slot p lives: which tensor (0 matrix, 1 bias, 2 factor), which
// layer k, its index within the channel's block of that tensor, and that
// block's size (out_k * in_k or out_k).
struct Slot {
  int kind;
  int layer;
  int index;
  int per_channel;
};

__device__ __forceinline__ Slot slot_of(int p) {
  const int starts[12] = {kH0, kH1, kH2, kH3, kB0, kB1, kB2, kB3, kA0, kA1, kA2, kPacked};
  int segment = 0;
  while (p >= starts[segment + 1]) ++segment;
  Slot slot;
  slot.kind = segment < 4 ? 0 : (segment < 8 ? 1 : 2);
  slot.layer = segment - 4 * slot.kind;
  slot.index = p - starts[segment];
  slot.per_channel = starts[segment + 1] - starts[segment];
  return slot;
}

template <typename T>
__device__ __forceinline__ const T* raw_parameter(const DensityParameters<T>& parameters, Slot slot, int channel) {
  const T* base = slot.kind == 0   ? parameters.matrix[slot.layer]
                  : slot.kind == 1 ? parameters.bias[slot.layer]
                                   : parameters.factor[slot.layer];
  return base + (long long)channel * slot.per_channel + slot.index;
}

template <typename T>
__device__ __forceinline__ T logistic(T x) {
  return T(1) / (T(1) + exp(-x));
}

template <typename T>
__device__ __forceinline__ T softplus(T x) {  // log(1 + e^x) without overflow
  return x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x));
}

// packed = [softplus(matrix), bias, tanh(factor)] of `channel`. Every thread
// of the block calls it; the caller synchronises before and after.
template <typename T>
__device__ void load_packed(const DensityParameters<T>& parameters, int channel, T* packed) {
  for (int p = threadIdx.x; p < kPacked; p += blockDim.x) {
    const Slot slot = slot_of(p);
    const T raw = *raw_parameter(parameters, slot, channel);
    packed[p] = slot.kind == 0 ? softplus(raw) : (slot.kind == 2 ? tanh(raw) : raw);
  }
}

// z = H v + b for one layer, H row-major [Out, In].
template <int In, int Out, typename T>
__device__ __forceinline__ void affine(const T* H, const T* b, const T* v, T* z) {
#pragma unroll
  for (int i = 0; i < Out; ++i) {
    T sum = b[i];
#pragma unroll
    for (int j = 0; j < In; ++j) sum += H[i * In + j] * v[j];
    z[i] = sum;
  }
}

// v_next = g(z) = z + a ∘ tanh(z); keeps tanh(z) for the backward pass.
template <int Width, typename T>
__device__ __forceinline__ void nonlinearity(const T* a, const T* z, T* tanh_z, T* v_next) {
#pragma unroll
  for (int i = 0; i < Width; ++i) {
    tanh_z[i] = tanh(z[i]);
    v_next[i] = z[i] + a[i] * tanh_z[i];
  }
}

// The activations of one evaluation of the chain at one element.
template <typename T>
struct ChainTrace {
  T v0[1], v1[3], v2[3], v3[3];  // v_k, the input of f_k
  T t0[3], t1[3], t2[3];         // tanh(z_k)
};

// The logit of c at x (the chain before its final sigmoid):
// v_0 = x, z_k = H^(k) v_k + b^(k), v_{k+1} = z_k + a^(k) ∘ tanh(z_k), logit = z_3.
template <typename T>
__device__ __forceinline__ T chain_forward(const T* P, T x, ChainTrace<T>& trace) {
  T z[3];
  trace.v0[0] = x;
  affine<1, 3>(P + kH0, P + kB0, trace.v0, z);
  nonlinearity<3>(P + kA0, z, trace.t0, trace.v1);
  affine<3, 3>(P + kH1, P + kB1, trace.v1, z);
  nonlinearity<3>(P + kA1, z, trace.t1, trace.v2);
  affine<3, 3>(P + kH2, P + kB2, trace.v2, z);
  nonlinearity<3>(P + kA2, z, trace.t2, trace.v3);
  T logit;
  affine<3, 1>(P + kH3, P + kB3, trace.v3, &logit);
  return logit;
}

// Back through z = H v + b: dL/db += dL/dz, dL/dH += dL/dz v^T, dL/dv = H^T dL/dz.
template <int In, int Out, typename T>
__device__ __forceinline__ void affine_backward(const T* H, const T* v, const T* z_grad, T* H_grad, T* b_grad,
                                                T* v_grad) {
#pragma unroll
  for (int j = 0; j < In; ++j) v_grad[j] = T(0);
#pragma unroll
  for (int i = 0; i < Out; ++i) {
    b_grad[i] += z_grad[i];
#pragma unroll
    for (int j = 0; j < In; ++j) {
      H_grad[i * In + j] += z_grad[i] * v[j];
      v_grad[j] += H[i * In + j] * z_grad[i];
    }
  }
}

// Back through v_next = z + a ∘ tanh(z):
// dL/dz = dL/dv_next ∘ (1 + a ∘ (1 - tanh^2 z)),  dL/da += dL/dv_next ∘ tanh(z).
template <int Width, typename T>
__device__ __forceinline__ void nonlinearity_backward(const T* a, const T* tanh_z, const T* v_next_grad, T* a_grad,
                                                      T* z_grad) {
#pragma unroll
  for (int i = 0; i < Width; ++i) {
    a_grad[i] += v_next_grad[i] * tanh_z[i];
    z_grad[i] = v_next_grad[i] * (T(1) + a[i] * (T(1) - tanh_z[i] * tanh_z[i]));
  }
}

// Back through the chain from dL/dlogit: accumulates dL/dH, dL/db, dL/da into
// G (packed layout) and returns dL/dx.
template <typename T>
__device__ __forceinline__ T chain_backward(const T* P, const ChainTrace<T>& trace, T logit_grad, T* G) {
  T z_grad[3], v_grad[3];
  affine_backward<3, 1>(P + kH3, trace.v3, &logit_grad, G + kH3, G + kB3, v_grad);
  nonlinearity_backward<3>(P + kA2, trace.t2, v_grad, G + kA2, z_grad);
  affine_backward<3, 3>(P + kH2, trace.v2, z_grad, G + kH2, G + kB2, v_grad);
  nonlinearity_backward<3>(P + kA1, trace.t1, v_grad, G + kA1, z_grad);
  affine_backward<3, 3>(P + kH1, trace.v1, z_grad, G + kH1, G + kB1, v_grad);
  nonlinearity_backward<3>(P + kA0, trace.t0, v_grad, G + kA0, z_grad);
  T x_grad;
  affine_backward<1, 3>(P + kH0, trace.v0, z_grad, G + kH0, G + kB0, &x_grad);
  return x_grad;
}

// The element at position m of a channel's N * inner elements.
__device__ __forceinline__ long long element_index(long long m, int channel, int channels, long long inner) {
  const long long n = m / inner;
  return (n * channels + channel) * inner + (m - n * inner);
}

// y_out = max(p, bound), p = |sigmoid(s u) - sigmoid(s l)|, u, l = logits of c
// at y + 1/2 and y - 1/2, s = -sign(u + l) (+1 at 0). Layout: see the top.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    factorized_density_forward(const T* y, T* likelihoods, DensityParameters<T> parameters, long long batch,
                               int channels, long long inner, T bound) {
  __shared__ T packed[kPacked];
  const long long count = batch * inner;
  for (int channel = blockIdx.y; channel < channels; channel += gridDim.y) {
    __syncthreads();  // the previous channel's readers are done
    load_packed(parameters, channel, packed);
    __syncthreads();
    for (long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x; m < count;
         m += (long long)gridDim.x * blockDim.x) {
      const long long i = element_index(m, channel, channels, inner);
      ChainTrace<T> trace;  // unused here; the compiler drops its stores
      const T upper = chain_forward(packed, y[i] + T(0.5), trace);
      const T lower = chain_forward(packed, y[i] - T(0.5), trace);
      const T sign = upper + lower > T(0) ? T(-1) : T(1);
      const T p = fabs(logistic(sign * upper) - logistic(sign * lower));
      likelihoods[i] = p > bound ? p : bound;
    }
  }
}

// dL/dy and the parameter gradients (formulas in factorized_entropy_model.h):
//   g = dL/dy_out where p >= bound or dL/dy_out < 0, else 0   (LowerBound)
//   dL/du = g sigmoid'(u),  dL/dl = -g sigmoid'(l), then back through both chains.
// Parameter gradients: per-thread sums in registers (packed layout), a block
// reduction (warp shuffles, then shared memory across warps), then per slot
// the chain rule through the reparametrisation and one atomicAdd:
//   dL/dmatrix = dL/dH sigmoid(matrix),  dL/dfactor = dL/da (1 - a^2).
// y_grad may be null (no input gradient wanted). Layout: see the top.
// The per-thread sums, both chains' traces and their gradients keep many
// values live: unbounded, ptxas gave the f32 kernel 149 registers, one block
// of 8 warps per multiprocessor, too few to hide the latency of its
// dependent chains; bounded to two blocks (128 registers) it keeps about 30
// values in local memory (L1).
template <typename T>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 4 ? kBackwardBlocks : 1)
    factorized_density_backward(const T* y, const T* output_grad, T* y_grad, DensityParameters<T> parameters,
                                DensityGradients<T> gradients, long long batch, int channels, long long inner,
                                T bound) {
  __shared__ T packed[kPacked];
  __shared__ T warp_sums[kWarps][kPacked];
  const long long count = batch * inner;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int channel = blockIdx.y; channel < channels; channel += gridDim.y) {
    __syncthreads();  // the previous channel's readers of packed and warp_sums are done
    load_packed(parameters, channel, packed);
    __syncthreads();

    T G[kPacked];
#pragma unroll
    for (int q = 0; q < kPacked; ++q) G[q] = T(0);
    for (long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x; m < count;
         m += (long long)gridDim.x * blockDim.x) {
      const long long i = element_index(m, channel, channels, inner);
      ChainTrace<T> upper_trace, lower_trace;
      const T upper = chain_forward(packed, y[i] + T(0.5), upper_trace);
      const T lower = chain_forward(packed, y[i] - T(0.5), lower_trace);
      const T sign = upper + lower > T(0) ? T(-1) : T(1);
      const T sigmoid_upper = logistic(sign * upper);
      const T sigmoid_lower = logistic(sign * lower);
      const T p = fabs(sigmoid_upper - sigmoid_lower);
      const T dy = output_grad[i];
      const T p_grad = (p >= bound || dy < T(0)) ? dy : T(0);
      // sigmoid' is even: sigmoid'(s u) = sigmoid'(u).
      const T upper_grad = p_grad * sigmoid_upper * (T(1) - sigmoid_upper);
      const T lower_grad = -p_grad * sigmoid_lower * (T(1) - sigmoid_lower);
      const T x_grad =
          chain_backward(packed, upper_trace, upper_grad, G) + chain_backward(packed, lower_trace, lower_grad, G);
      if (y_grad) y_grad[i] = x_grad;
    }

#pragma unroll
    for (int q = 0; q < kPacked; ++q) {
      T value = G[q];
      for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
      if (lane == 0) warp_sums[warp][q] = value;
    }
    __syncthreads();
    for (int q = threadIdx.x; q < kPacked; q += blockDim.x) {
      T total = T(0);
      for (int w = 0; w < kWarps; ++w) total += warp_sums[w][q];
      const Slot slot = slot_of(q);
      const long long offset = (long long)channel * slot.per_channel + slot.index;
      if (slot.kind == 0) {
        atomicAdd(gradients.matrix[slot.layer] + offset, total * logistic(*raw_parameter(parameters, slot, channel)));
      } else if (slot.kind == 1) {
        atomicAdd(gradients.bias[slot.layer] + offset, total);
      } else {
        const T a = packed[q];
        atomicAdd(gradients.factor[slot.layer] + offset, total * (T(1) - a * a));
      }
    }
  }
}

struct Grid {
  dim3 blocks;
  long long batch, inner;
  int channels;
};

// blockIdx.y: channels (up to 65535, the kernels loop past that); blockIdx.x:
// enough blocks that every thread takes about kElementsPerThread of a
// channel's elements, capped so that the whole grid stays near 4096 blocks
// (at least 32 per channel) and atomics stay few. Several elements per
// thread amortise the backward's block reduction of 43 parameter gradients,
// which with one element per thread cost as much as the chains themselves.
constexpr long long kElementsPerThread = 4;

Grid grid_for(const Shape& shape) {
  Grid grid;
  grid.batch = shape[0];
  grid.channels = static_cast<int>(shape[1]);
  grid.inner = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) grid.inner *= shape[axis];
  const long long per_channel = grid.batch * grid.inner;
  const unsigned int channel_blocks = static_cast<unsigned int>(std::min<long long>(grid.channels, 65535));
  const long long cap = std::max<long long>(32, 4096 / channel_blocks);
  const long long x_blocks = std::max<long long>(
      1, std::min<long long>((per_channel + kThreads * kElementsPerThread - 1) / (kThreads * kElementsPerThread), cap));
  grid.blocks = dim3(static_cast<unsigned int>(x_blocks), channel_blocks, 1);
  return grid;
}

}  // namespace

void FactorizedEntropyModel::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  if (inputs[0]->numel() == 0) return;
  const Grid grid = grid_for(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    DensityParameters<T> parameters;
    for (int k = 0; k < kLayers; ++k) {
      parameters.matrix[k] = matrix_[k]->value.data<T>();
      parameters.bias[k] = bias_[k]->value.data<T>();
      if (k < kLayers - 1) parameters.factor[k] = factor_[k]->value.data<T>();
    }
    factorized_density_forward<T><<<grid.blocks, kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), outputs[0]->data<T>(), parameters, grid.batch, grid.channels, grid.inner,
        static_cast<T>(likelihood_bound_));
    cuda::check_launch("factorized_density_forward", __FILE__, __LINE__);
  });
}

void FactorizedEntropyModel::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (inputs[0]->numel() == 0) return;
  const Grid grid = grid_for(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    DensityParameters<T> parameters;
    DensityGradients<T> gradients;
    for (int k = 0; k < kLayers; ++k) {
      parameters.matrix[k] = matrix_[k]->value.data<T>();
      parameters.bias[k] = bias_[k]->value.data<T>();
      gradients.matrix[k] = matrix_[k]->grad.data<T>();
      gradients.bias[k] = bias_[k]->grad.data<T>();
      if (k < kLayers - 1) {
        parameters.factor[k] = factor_[k]->value.data<T>();
        gradients.factor[k] = factor_[k]->grad.data<T>();
      }
    }
    T* y_grad = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    factorized_density_backward<T><<<grid.blocks, kThreads, 0, cuda::stream(ctx)>>>(
        inputs[0]->data<T>(), output_grads[0]->data<T>(), y_grad, parameters, gradients, grid.batch, grid.channels,
        grid.inner, static_cast<T>(likelihood_bound_));
    cuda::check_launch("factorized_density_backward", __FILE__, __LINE__);
  });
}

}  // namespace plexus::layers

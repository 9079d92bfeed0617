#pragma once
// The dense (fully connected) map, shared by FullyConnected and
// SoftmaxProjection (a dense projection followed by softmax cross-entropy).
// All matrices row-major, W stored [out, in]:
//   forward   y [N, out] = x [N, in] W^T + b          (b may be null)
//   backward  dx [N, in] = dy W                       (overwrites; skipped when dx is null)
//             dW [out, in] += dy^T x                  (accumulates)
//             db [out] += sum_n dy[n, :]              (accumulates; skipped when db is null)
// No Eigen here: the header is included from .cu files.
#include <cstdint>
#include <string>

#include "plexus/context.h"

namespace plexus::layers::dense {

template <typename T>
void forward_cpu(const T* x, const T* w, const T* b, T* y, std::int64_t batch, std::int64_t in, std::int64_t out);

template <typename T>
void backward_cpu(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t batch, std::int64_t in,
                  std::int64_t out);

#if PLEXUS_WITH_CUDA
// The backward above on the context's stream: the two products through cuBLAS,
// the bias gradient by a deterministic column-sum kernel (dense.cu). Row n of
// dy starts at dy + n * dy_stride (dy_stride >= out; out when dy is dense, more
// when dy is the first `out` columns of a padded buffer; the rest is not read).
template <typename T>
void backward_cuda(const Context& ctx, const T* x, const T* w, const T* dy, int dy_stride, T* dx, T* dw, T* db,
                   int batch, int in, int out);

// cuBLAS takes int sizes: `value` as an int, or a ShapeError naming `who` and `what`.
int cublas_size(std::int64_t value, const char* what, const std::string& who);
#endif

}  // namespace plexus::layers::dense

// CPU half of the dense map (math in dense.h), with Eigen.
#include "fully_connected/dense.h"

#include <Eigen/Core>

namespace plexus::layers::dense {

namespace {
template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;
}  // namespace

template <typename T>
void forward_cpu(const T* x, const T* w, const T* b, T* y, std::int64_t batch, std::int64_t in, std::int64_t out) {
  Eigen::Map<const RowMatrix<T>> x_map(x, batch, in);
  Eigen::Map<const RowMatrix<T>> w_map(w, out, in);
  Eigen::Map<RowMatrix<T>> y_map(y, batch, out);
  y_map.noalias() = x_map * w_map.transpose();
  if (b) y_map.rowwise() += Eigen::Map<const RowVector<T>>(b, out);
}

template <typename T>
void backward_cpu(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t batch, std::int64_t in,
                  std::int64_t out) {
  Eigen::Map<const RowMatrix<T>> x_map(x, batch, in);
  Eigen::Map<const RowMatrix<T>> w_map(w, out, in);
  Eigen::Map<const RowMatrix<T>> dy_map(dy, batch, out);
  if (dx) Eigen::Map<RowMatrix<T>>(dx, batch, in).noalias() = dy_map * w_map;
  Eigen::Map<RowMatrix<T>>(dw, out, in).noalias() += dy_map.transpose() * x_map;
  if (db) Eigen::Map<RowVector<T>>(db, out) += dy_map.colwise().sum();
}

template void forward_cpu<float>(const float*, const float*, const float*, float*, std::int64_t, std::int64_t,
                                 std::int64_t);
template void forward_cpu<double>(const double*, const double*, const double*, double*, std::int64_t, std::int64_t,
                                  std::int64_t);
template void backward_cpu<float>(const float*, const float*, const float*, float*, float*, float*, std::int64_t,
                                  std::int64_t, std::int64_t);
template void backward_cpu<double>(const double*, const double*, const double*, double*, double*, double*, std::int64_t,
                                   std::int64_t, std::int64_t);

}  // namespace plexus::layers::dense

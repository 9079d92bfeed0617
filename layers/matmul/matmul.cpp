#include "matmul/matmul.h"

#include <cmath>
#include <string>

#include <Eigen/Core>

#include "plexus/cpu_parallel.h"

namespace plexus::layers {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// z[i] = alpha * op(x[i]) op(y[i]) ([m, n], row-major) for i < batch, the
// products spread over the threads (each writes its own z[i]).
template <typename T>
void gemm_cpu(bool transpose_x, bool transpose_y, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* x,
              std::int64_t stride_x, const T* y, std::int64_t stride_y, T* z, std::int64_t stride_z,
              std::int64_t batch) {
  if (m == 0 || n == 0) return;
  parallel_for(batch, [&](std::int64_t i) {
    Eigen::Map<const RowMatrix<T>> x_i(x + i * stride_x, transpose_x ? k : m, transpose_x ? m : k);
    Eigen::Map<const RowMatrix<T>> y_i(y + i * stride_y, transpose_y ? n : k, transpose_y ? k : n);
    Eigen::Map<RowMatrix<T>> z_i(z + i * stride_z, m, n);
    if (!transpose_x && !transpose_y) z_i.noalias() = alpha * (x_i * y_i);
    else if (!transpose_x) z_i.noalias() = alpha * (x_i * y_i.transpose());
    else if (!transpose_y) z_i.noalias() = alpha * (x_i.transpose() * y_i);
    else z_i.noalias() = alpha * (x_i.transpose() * y_i.transpose());
  });
}

std::string transposes_str(bool transpose_a, bool transpose_b) {
  return std::string("transpose_a ") + (transpose_a ? "true" : "false") + ", transpose_b " +
         (transpose_b ? "true" : "false");
}

}  // namespace

MatMul::MatMul(LayerConfig& config)
    : transpose_a_(config.boolean("transpose_a", false)),
      transpose_b_(config.boolean("transpose_b", false)),
      scale_(config.number("scale", 1.0)) {
  if (!std::isfinite(scale_) || scale_ == 0)
    config.fail("scale", "must be a finite non-zero number, got " + std::to_string(scale_));
}

MatMul::Sizes MatMul::sizes_of(const Shape& a, const Shape& b) const {
  for (const auto& [shape, name] : {std::pair{&a, "input 0 (A)"}, std::pair{&b, "input 1 (B)"}})
    if (shape->size() < 2)
      fail_shape(std::string(name) + " is " + shape_str(*shape) +
                 "; MatMul needs [..., rows, columns]: at least 2 dimensions, the last two the matrix");
  const Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  if (batch_a != batch_b)
    fail_shape("A " + shape_str(a) + " and B " + shape_str(b) + " have batch dimensions (all but the last two) " +
               shape_str(batch_a) + " and " + shape_str(batch_b) + "; MatMul needs them equal (no broadcasting)");
  const std::int64_t a_rows = a[a.size() - 2], a_columns = a.back();
  const std::int64_t b_rows = b[b.size() - 2], b_columns = b.back();
  Sizes sizes;
  sizes.batch = shape_numel(batch_a);
  sizes.rows = transpose_a_ ? a_columns : a_rows;
  sizes.inner = transpose_a_ ? a_rows : a_columns;
  sizes.columns = transpose_b_ ? b_rows : b_columns;
  const std::int64_t b_inner = transpose_b_ ? b_columns : b_rows;
  if (sizes.inner != b_inner)
    fail_shape("A " + shape_str(a) + " gives op(A) " + shape_str({sizes.rows, sizes.inner}) + " and B " + shape_str(b) +
               " gives op(B) " + shape_str({b_inner, sizes.columns}) + " (" +
               transposes_str(transpose_a_, transpose_b_) + "): op(A)'s columns (" + std::to_string(sizes.inner) +
               ") must equal op(B)'s rows (" + std::to_string(b_inner) + ")");
  return sizes;
}

std::vector<Shape> MatMul::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2) fail_shape("takes 2 inputs (A and B), got " + std::to_string(inputs.size()));
  const Sizes sizes = sizes_of(inputs[0], inputs[1]);
  Shape output(inputs[0].begin(), inputs[0].end() - 2);
  output.push_back(sizes.rows);
  output.push_back(sizes.columns);
  shape_numel(output);  // ShapeError when the product's elements overflow
  return {output};
}

void MatMul::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Sizes sizes = sizes_of(inputs[0]->shape(), inputs[1]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    matmul_forward<T>(sizes, transpose_a_, transpose_b_, T(scale_), inputs[0]->data<T>(), inputs[1]->data<T>(),
                      outputs[0]->data<T>(), gemm_cpu<T>);
  });
}

void MatMul::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                          const MutableTensors& input_grads) {
  const Sizes sizes = sizes_of(inputs[0]->shape(), inputs[1]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    matmul_backward<T>(sizes, transpose_a_, transpose_b_, T(scale_), inputs[0]->data<T>(), inputs[1]->data<T>(),
                       output_grads[0]->data<T>(), input_grads[0] ? input_grads[0]->data<T>() : nullptr,
                       input_grads[1] ? input_grads[1]->data<T>() : nullptr, gemm_cpu<T>);
  });
}

void register_matmul(Registry& registry) {
  registry.add(
      "MatMul", [](LayerConfig& config) { return std::make_unique<MatMul>(config); },
      "C = scale * op(A) op(B) over the last two dimensions, batched over the equal leading ones "
      "(params transpose_a, transpose_b, scale)");
}

}  // namespace plexus::layers

#include "softmax/softmax.h"

#include <string>

#include <Eigen/Core>

#include "plexus/cpu_parallel.h"

namespace plexus::layers {

namespace {

// The largest |axis| a spec may name; the input's rank bounds it further (output_shapes).
constexpr std::int64_t kMaxAxis = 64;

template <typename T>
using LineBlock = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

Softmax::Softmax(LayerConfig& config) : axis_(config.bounded_integer("axis", 1, -kMaxAxis, kMaxAxis - 1)) {}

int Softmax::resolved_axis(const Shape& shape) const {
  const std::int64_t rank = static_cast<std::int64_t>(shape.size());
  const std::int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
  if (axis < 0 || axis >= rank)
    fail_shape("axis " + std::to_string(axis_) + " is outside input " + shape_str(shape) + " (rank " +
               std::to_string(rank) + ": axes " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  return static_cast<int>(axis);
}

Softmax::Lines Softmax::lines_of(const Shape& shape) const {
  const int axis = resolved_axis(shape);
  Lines lines;
  for (int d = 0; d < axis; ++d) lines.outer *= shape[d];
  lines.length = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) lines.inner *= shape[d];
  return lines;
}

std::vector<Shape> Softmax::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  if (inputs[0].empty()) fail_shape("input is a scalar []; Softmax needs at least 1 dimension");
  resolved_axis(inputs[0]);
  return {inputs[0]};
}

// Each outer index o is a row-major [L, inner] block whose columns are the
// softmax lines; the blocks are independent, so they spread over the threads.
void Softmax::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Lines lines = lines_of(inputs[0]->shape());
  if (inputs[0]->numel() == 0) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = inputs[0]->data<T>();
    T* y = outputs[0]->data<T>();
    const std::int64_t block = lines.length * lines.inner;
    parallel_for(lines.outer, [&](std::int64_t o) {
      Eigen::Map<const LineBlock<T>> x_block(x + o * block, lines.length, lines.inner);
      Eigen::Map<LineBlock<T>> y_block(y + o * block, lines.length, lines.inner);
      const Eigen::Array<T, 1, Eigen::Dynamic> line_max = x_block.colwise().maxCoeff();
      y_block = (x_block.rowwise() - line_max).exp();
      const Eigen::Array<T, 1, Eigen::Dynamic> line_sum = y_block.colwise().sum();
      y_block.rowwise() /= line_sum;
    });
  });
}

void Softmax::backward_cpu(Context&, const ConstTensors&, const ConstTensors& outputs, const ConstTensors& output_grads,
                           const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  const Lines lines = lines_of(outputs[0]->shape());
  if (outputs[0]->numel() == 0) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* y = outputs[0]->data<T>();
    const T* dy = output_grads[0]->data<T>();
    T* dx = input_grads[0]->data<T>();
    const std::int64_t block = lines.length * lines.inner;
    parallel_for(lines.outer, [&](std::int64_t o) {
      Eigen::Map<const LineBlock<T>> y_block(y + o * block, lines.length, lines.inner);
      Eigen::Map<const LineBlock<T>> dy_block(dy + o * block, lines.length, lines.inner);
      Eigen::Map<LineBlock<T>> dx_block(dx + o * block, lines.length, lines.inner);
      const Eigen::Array<T, 1, Eigen::Dynamic> line_dot = (dy_block * y_block).colwise().sum();
      dx_block = y_block * (dy_block.rowwise() - line_dot);
    });
  });
}

void register_softmax(Registry& registry) {
  registry.add(
      "Softmax", [](LayerConfig& config) { return std::make_unique<Softmax>(config); },
      "y = exp(x - max) / sum exp(x - max) along one axis (param axis, default 1: channels)");
}

}  // namespace plexus::layers

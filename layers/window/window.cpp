#include "window/window.h"

#include <string>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

namespace {

// Calls visit(image_index, window_index) with the flat indices of x[n, c, h, x]
// and of the windows element that holds it (formula in window.h), for every
// element; the image's planes [n, c] spread over the CPU threads (each
// element has one place in the windows, so planes write disjoint elements).
template <typename Visit>
void for_each_element(const WindowGeometry& g, Visit&& visit) {
  const std::int64_t w = g.window, depth = g.head_channels(), down = g.windows_down(), across = g.windows_across();
  parallel_for(g.batch * g.channels, [&](std::int64_t plane) {
    const std::int64_t n = plane / g.channels, c = plane % g.channels;
    const std::int64_t head = c / depth, d = c % depth;
    for (std::int64_t row = 0; row < g.height; ++row) {
      // The row's place in the shifted image, a*w + i = (row - s) mod H.
      const std::int64_t shifted_row = (row - g.shift + g.height) % g.height;
      const std::int64_t a = shifted_row / w, i = shifted_row % w;
      const std::int64_t image_row = (plane * g.height + row) * g.width;
      for (std::int64_t column = 0; column < g.width; ++column) {
        const std::int64_t shifted_column = (column - g.shift + g.width) % g.width;
        const std::int64_t b = shifted_column / w, j = shifted_column % w;
        const std::int64_t window_index = ((n * down + a) * across + b) * g.heads + head;
        visit(image_row + column, (window_index * w * w + i * w + j) * depth + d);
      }
    }
  });
}

std::int64_t read_shift(LayerConfig& config, std::int64_t window) {
  const std::int64_t shift = config.bounded_integer("shift", 0, 0, limits::kMaxConvolutionParameter);
  if (shift >= window)
    config.fail("shift", "shift " + std::to_string(shift) + " must be smaller than window " + std::to_string(window));
  return shift;
}

}  // namespace

void gather_windows_cpu(const WindowGeometry& g, const Tensor& image, Tensor& windows) {
  dispatch_float(image.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* from = image.data<T>();
    T* to = windows.data<T>();
    for_each_element(
        g, [&](std::int64_t image_index, std::int64_t window_index) { to[window_index] = from[image_index]; });
  });
}

void gather_image_cpu(const WindowGeometry& g, const Tensor& windows, Tensor& image) {
  dispatch_float(image.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* from = windows.data<T>();
    T* to = image.data<T>();
    for_each_element(
        g, [&](std::int64_t image_index, std::int64_t window_index) { to[image_index] = from[window_index]; });
  });
}

WindowPartition::WindowPartition(LayerConfig& config)
    : window_(config.bounded_integer("window", 1, limits::kMaxConvolutionParameter)),
      shift_(read_shift(config, window_)),
      heads_(config.bounded_integer("heads", 1, 1, limits::kMaxChannels)) {}

WindowGeometry WindowPartition::geometry(const Shape& image) const {
  return {image[0], image[1], image[2], image[3], window_, shift_, heads_};
}

std::vector<Shape> WindowPartition::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input is " + shape_str(x) + "; WindowPartition needs [N, C, H, W]");
  if (x[2] % window_ != 0 || x[3] % window_ != 0)
    fail_shape("input " + shape_str(x) + " has height " + std::to_string(x[2]) + " and width " + std::to_string(x[3]) +
               ", which must both be multiples of window " + std::to_string(window_));
  if (x[1] % heads_ != 0)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) + " channels, not a multiple of heads " +
               std::to_string(heads_));
  return {geometry(x).windows_shape()};
}

void WindowPartition::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  gather_windows_cpu(geometry(inputs[0]->shape()), *inputs[0], *outputs[0]);
}

void WindowPartition::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                   const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads[0]) gather_image_cpu(geometry(inputs[0]->shape()), *output_grads[0], *input_grads[0]);
}

WindowReverse::WindowReverse(LayerConfig& config)
    : window_(config.bounded_integer("window", 1, limits::kMaxConvolutionParameter)),
      shift_(read_shift(config, window_)) {}

WindowGeometry WindowReverse::geometry(const Shape& windows, const Shape& reference) const {
  return {reference[0], reference[1], reference[2], reference[3], window_, shift_, windows[1]};
}

std::vector<Shape> WindowReverse::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2)
    fail_shape("takes 2 inputs (the windows and a reference [N, C, H, W] giving the output's shape), got " +
               std::to_string(inputs.size()));
  const Shape &windows = inputs[0], &reference = inputs[1];
  if (windows.size() != 4) fail_shape("input 0 is " + shape_str(windows) + "; WindowReverse needs [B, heads, w*w, D]");
  if (reference.size() != 4)
    fail_shape("input 1 (the reference) is " + shape_str(reference) + "; WindowReverse needs [N, C, H, W]");
  if (reference[2] % window_ != 0 || reference[3] % window_ != 0)
    fail_shape("reference " + shape_str(reference) + " has height " + std::to_string(reference[2]) + " and width " +
               std::to_string(reference[3]) + ", which must both be multiples of window " + std::to_string(window_));
  if (windows[1] < 1 || windows[3] < 1 || reference[1] % windows[1] != 0 || reference[1] / windows[1] != windows[3])
    fail_shape("windows " + shape_str(windows) + " hold " + std::to_string(windows[1]) + " heads of " +
               std::to_string(windows[3]) + " channels, but the reference " + shape_str(reference) + " has " +
               std::to_string(reference[1]) + " channels");
  const WindowGeometry g = geometry(windows, reference);
  if (windows != g.windows_shape())
    fail_shape("windows " + shape_str(windows) + " do not fit the reference " + shape_str(reference) + " with window " +
               std::to_string(window_) + ": expected " + shape_str(g.windows_shape()));
  return {{reference[0], reference[1], reference[2], reference[3]}};
}

void WindowReverse::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  gather_image_cpu(geometry(inputs[0]->shape(), inputs[1]->shape()), *inputs[0], *outputs[0]);
}

void WindowReverse::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                 const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads[0])
    gather_windows_cpu(geometry(inputs[0]->shape(), inputs[1]->shape()), *output_grads[0], *input_grads[0]);
}

void register_window(Registry& registry) {
  registry.add(
      "WindowPartition", [](LayerConfig& config) { return std::make_unique<WindowPartition>(config); },
      "Swin window partition: [N, C, H, W] -> [N*(H/w)*(W/w), heads, w*w, C/heads], after a cyclic shift by -shift");
  registry.add(
      "WindowReverse", [](LayerConfig& config) { return std::make_unique<WindowReverse>(config); },
      "inverse of WindowPartition: windows [B, heads, w*w, D] and a reference [N, C, H, W] -> [N, C, H, W]");
}

}  // namespace plexus::layers

#include "avg_pool2d/avg_pool2d.h"

#include <algorithm>
#include <string>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

AvgPool2d::AvgPool2d(LayerConfig& config)
    : kernel_(config.bounded_integer("kernel", 1, limits::kMaxConvolutionParameter)),
      stride_(config.bounded_integer("stride", kernel_, 1, limits::kMaxConvolutionParameter)),
      padding_(config.bounded_integer("padding", 0, 0, limits::kMaxConvolutionParameter)) {
  if (padding_ > kernel_ / 2)
    config.fail("padding", "padding " + std::to_string(padding_) + " must be at most half the kernel " +
                               std::to_string(kernel_) + " (" + std::to_string(kernel_ / 2) + ")");
}

AvgPool2d::Geometry AvgPool2d::geometry(const Shape& input) const {
  return {input[0] * input[1],
          input[2],
          input[3],
          (input[2] + 2 * padding_ - kernel_) / stride_ + 1,
          (input[3] + 2 * padding_ - kernel_) / stride_ + 1,
          kernel_,
          stride_,
          padding_};
}

std::vector<Shape> AvgPool2d::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() != 4) fail_shape("input is " + shape_str(x) + "; AvgPool2d needs [N, C, H, W]");
  if (x[2] + 2 * padding_ < kernel_ || x[3] + 2 * padding_ < kernel_)
    fail_shape("input " + shape_str(x) + " with padding " + std::to_string(padding_) + " is smaller than the " +
               std::to_string(kernel_) + "x" + std::to_string(kernel_) + " kernel: the output would be empty");
  const Geometry g = geometry(x);
  return {{x[0], x[1], g.out_height, g.out_width}};
}

namespace {

// The outputs o whose window o*s - p .. o*s - p + k - 1 holds input position i:
// ceil((i + p - k + 1) / s) <= o <= floor((i + p) / s), within [0, outputs).
void outputs_covering(std::int64_t i, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                      std::int64_t outputs, std::int64_t& first, std::int64_t& last) {
  const std::int64_t low = i + padding - kernel + 1;
  first = low <= 0 ? 0 : (low + stride - 1) / stride;
  last = std::min((i + padding) / stride, outputs - 1);
}

}  // namespace

void AvgPool2d::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Geometry g = geometry(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = inputs[0]->data<T>();
    T* y = outputs[0]->data<T>();
    const T scale = T(1) / static_cast<T>(g.kernel * g.kernel);
    parallel_for(g.planes, [&](std::int64_t plane) {  // planes [n, c] are independent
      const T* x_plane = x + plane * g.height * g.width;
      for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
        const std::int64_t h0 = std::max<std::int64_t>(oh * g.stride - g.padding, 0);
        const std::int64_t h1 = std::min(oh * g.stride - g.padding + g.kernel, g.height);
        for (std::int64_t ow = 0; ow < g.out_width; ++ow) {
          const std::int64_t w0 = std::max<std::int64_t>(ow * g.stride - g.padding, 0);
          const std::int64_t w1 = std::min(ow * g.stride - g.padding + g.kernel, g.width);
          T sum = 0;
          for (std::int64_t h = h0; h < h1; ++h)
            for (std::int64_t w = w0; w < w1; ++w) sum += x_plane[h * g.width + w];
          y[(plane * g.out_height + oh) * g.out_width + ow] = sum * scale;
        }
      }
    });
  });
}

void AvgPool2d::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  const Geometry g = geometry(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* dy = output_grads[0]->data<T>();
    T* dx = input_grads[0]->data<T>();
    const T scale = T(1) / static_cast<T>(g.kernel * g.kernel);
    parallel_for(g.planes, [&](std::int64_t plane) {
      const T* dy_plane = dy + plane * g.out_height * g.out_width;
      for (std::int64_t h = 0; h < g.height; ++h) {
        std::int64_t oh0, oh1;
        outputs_covering(h, g.kernel, g.stride, g.padding, g.out_height, oh0, oh1);
        for (std::int64_t w = 0; w < g.width; ++w) {
          std::int64_t ow0, ow1;
          outputs_covering(w, g.kernel, g.stride, g.padding, g.out_width, ow0, ow1);
          T sum = 0;
          for (std::int64_t oh = oh0; oh <= oh1; ++oh)
            for (std::int64_t ow = ow0; ow <= ow1; ++ow) sum += dy_plane[oh * g.out_width + ow];
          dx[(plane * g.height + h) * g.width + w] = sum * scale;
        }
      }
    });
  });
}

void register_avg_pool2d(Registry& registry) {
  registry.add(
      "AvgPool2d", [](LayerConfig& config) { return std::make_unique<AvgPool2d>(config); },
      "average pooling (PyTorch AvgPool2d, count_include_pad): mean of each k x k window, padding counted as zeros");
}

}  // namespace plexus::layers

// LayerNorm and GroupNorm on the CPU (math in normalization.h). The mean and
// variance of each set are taken in f64 with two passes (mean, then the mean
// squared deviation), so that a large GroupNorm group in f32 loses nothing
// to cancellation. Parameter gradients are summed per work item, then over
// the items in order (add_in_order): the same bits for any thread count.
#include "normalization/normalization.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "plexus/checked_math.h"
#include "plexus/cpu_parallel.h"

namespace plexus::layers {

namespace {

// An input [N, C, d2, d3, ...] seen as N images of C channels and P pixels.
struct Geometry {
  std::int64_t images;
  std::int64_t channels;
  std::int64_t pixels;
};

Geometry geometry_of(const Shape& shape) {
  std::int64_t pixels = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis)
    pixels = checked_mul(pixels, shape[axis], "the pixel count of input " + shape_str(shape));
  return {shape[0], shape[1], pixels};
}

// LayerNorm works on blocks of this many pixels of one image, the items of
// parallel_for: long enough rows for the inner loops, small enough that the
// block's channels stay in cache between the passes.
constexpr std::int64_t kBlockPixels = 256;

// LayerNorm statistics, mean and r = 1 / sqrt(var + eps), of `count` pixels
// starting at x (channel c of pixel p at x[c * pixels + p]).
template <typename T>
void pixel_statistics(const T* x, std::int64_t channels, std::int64_t pixels, std::int64_t count, double eps,
                      std::vector<double>& mean, std::vector<double>& rstd) {
  mean.assign(static_cast<std::size_t>(count), 0.0);
  rstd.assign(static_cast<std::size_t>(count), 0.0);
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t p = 0; p < count; ++p) mean[p] += static_cast<double>(x[c * pixels + p]);
  for (std::int64_t p = 0; p < count; ++p) mean[p] /= static_cast<double>(channels);
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t p = 0; p < count; ++p) {
      const double d = static_cast<double>(x[c * pixels + p]) - mean[p];
      rstd[p] += d * d;
    }
  for (std::int64_t p = 0; p < count; ++p) rstd[p] = 1.0 / std::sqrt(rstd[p] / static_cast<double>(channels) + eps);
}

// GroupNorm statistics of `size` contiguous elements: {mean, r}.
template <typename T>
std::pair<double, double> row_statistics(const T* x, std::int64_t size, double eps) {
  double sum = 0.0;
  for (std::int64_t k = 0; k < size; ++k) sum += static_cast<double>(x[k]);
  const double mean = sum / static_cast<double>(size);
  double squares = 0.0;
  for (std::int64_t k = 0; k < size; ++k) {
    const double d = static_cast<double>(x[k]) - mean;
    squares += d * d;
  }
  return {mean, 1.0 / std::sqrt(squares / static_cast<double>(size) + eps)};
}

template <typename T>
T gamma_of(const T* gamma, std::int64_t c) {
  return gamma ? gamma[c] : T(1);
}

}  // namespace

// ---- Normalization: params, shapes, parameters ----

void Normalization::read_settings(LayerConfig& config, const char* affine_key) {
  eps_ = config.number("eps", 1e-5);
  affine_ = config.boolean(affine_key, true);
  if (!(eps_ > 0.0) || !std::isfinite(eps_))
    config.fail("eps", "must be a finite number > 0, got " + number_text(eps_));
}

std::vector<Shape> Normalization::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() < 2)
    fail_shape("input " + shape_str(x) + " has rank " + std::to_string(x.size()) +
               "; expected [N, C, ...] (rank >= 2, channels on axis 1)");
  if (x[1] < 1) fail_shape("input " + shape_str(x) + " has no channels; expected [N, C, ...] with C >= 1");
  if (channels_ > 0 && x[1] != channels_)
    fail_shape("input " + shape_str(x) + " has " + std::to_string(x[1]) +
               " channels, but gamma and beta were made for " + std::to_string(channels_));
  geometry_of(x);  // throws on overflow
  return {x};
}

void Normalization::create_parameters(const std::vector<Shape>& inputs) {
  channels_ = inputs[0][1];
  if (!affine_) return;
  declare_parameter("gamma", {channels_}, init::constant(1.0));
  declare_parameter("beta", {channels_}, init::constant(0.0));
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(LayerConfig& config) { read_settings(config, "elementwise_affine"); }

void LayerNorm::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Geometry g = geometry_of(inputs[0]->shape());
  const std::int64_t blocks = (g.pixels + kBlockPixels - 1) / kBlockPixels;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* gamma = values_or_null<T>(affine_parameter("gamma"));
    const T* beta = values_or_null<T>(affine_parameter("beta"));
    parallel_for(g.images * blocks, [&](std::int64_t item) {
      const std::int64_t first = item % blocks * kBlockPixels;
      const std::int64_t count = std::min(kBlockPixels, g.pixels - first);
      const std::int64_t offset = item / blocks * g.channels * g.pixels + first;
      const T* x = inputs[0]->data<T>() + offset;
      T* y = outputs[0]->data<T>() + offset;
      std::vector<double> mean, rstd;
      pixel_statistics(x, g.channels, g.pixels, count, eps(), mean, rstd);
      for (std::int64_t c = 0; c < g.channels; ++c) {
        const double scale = static_cast<double>(gamma_of(gamma, c));
        const double shift = beta ? static_cast<double>(beta[c]) : 0.0;
        for (std::int64_t p = 0; p < count; ++p)
          y[c * g.pixels + p] =
              static_cast<T>((static_cast<double>(x[c * g.pixels + p]) - mean[p]) * rstd[p] * scale + shift);
      }
    });
  });
}

void LayerNorm::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Geometry g = geometry_of(inputs[0]->shape());
  const std::int64_t blocks = (g.pixels + kBlockPixels - 1) / kBlockPixels;
  const std::int64_t items = g.images * blocks;
  Parameter* gamma_parameter = affine_parameter("gamma");
  Parameter* beta_parameter = affine_parameter("beta");
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* gamma = values_or_null<T>(gamma_parameter);
    // Per item: dgamma parts [items, C] and dbeta parts [items, C].
    std::vector<T> gamma_parts(gamma ? static_cast<std::size_t>(items * g.channels) : 0);
    std::vector<T> beta_parts(gamma_parts.size());
    parallel_for(items, [&](std::int64_t item) {
      const std::int64_t first = item % blocks * kBlockPixels;
      const std::int64_t count = std::min(kBlockPixels, g.pixels - first);
      const std::int64_t offset = item / blocks * g.channels * g.pixels + first;
      const T* x = inputs[0]->data<T>() + offset;
      const T* dy = output_grads[0]->data<T>() + offset;
      std::vector<double> mean, rstd;
      pixel_statistics(x, g.channels, g.pixels, count, eps(), mean, rstd);
      if (input_grads[0]) {
        // sum_c g and sum_c g xhat per pixel, g = dy gamma_c.
        std::vector<double> sum_g(static_cast<std::size_t>(count), 0.0), sum_g_xhat(sum_g.size(), 0.0);
        for (std::int64_t c = 0; c < g.channels; ++c) {
          const double scale = static_cast<double>(gamma_of(gamma, c));
          for (std::int64_t p = 0; p < count; ++p) {
            const std::int64_t e = c * g.pixels + p;
            const double gradient = static_cast<double>(dy[e]) * scale;
            sum_g[p] += gradient;
            sum_g_xhat[p] += gradient * (static_cast<double>(x[e]) - mean[p]) * rstd[p];
          }
        }
        T* dx = input_grads[0]->data<T>() + offset;
        const double inverse_channels = 1.0 / static_cast<double>(g.channels);
        for (std::int64_t c = 0; c < g.channels; ++c) {
          const double scale = static_cast<double>(gamma_of(gamma, c));
          for (std::int64_t p = 0; p < count; ++p) {
            const std::int64_t e = c * g.pixels + p;
            const double xhat = (static_cast<double>(x[e]) - mean[p]) * rstd[p];
            dx[e] = static_cast<T>(rstd[p] * (static_cast<double>(dy[e]) * scale - sum_g[p] * inverse_channels -
                                              xhat * sum_g_xhat[p] * inverse_channels));
          }
        }
      }
      if (!gamma) return;
      for (std::int64_t c = 0; c < g.channels; ++c) {
        double sum_dy_xhat = 0.0, sum_dy = 0.0;
        for (std::int64_t p = 0; p < count; ++p) {
          const std::int64_t e = c * g.pixels + p;
          sum_dy_xhat += static_cast<double>(dy[e]) * (static_cast<double>(x[e]) - mean[p]) * rstd[p];
          sum_dy += static_cast<double>(dy[e]);
        }
        gamma_parts[static_cast<std::size_t>(item * g.channels + c)] = static_cast<T>(sum_dy_xhat);
        beta_parts[static_cast<std::size_t>(item * g.channels + c)] = static_cast<T>(sum_dy);
      }
    });
    if (!gamma) return;
    add_in_order(gamma_parts.data(), items, g.channels, gradient_or_null<T>(gamma_parameter));
    add_in_order(beta_parts.data(), items, g.channels, gradient_or_null<T>(beta_parameter));
  });
}

// ---- GroupNorm ----

GroupNorm::GroupNorm(LayerConfig& config) : groups_(config.bounded_integer("groups", 1, limits::kMaxChannels)) {
  read_settings(config, "affine");
}

std::vector<Shape> GroupNorm::output_shapes(const std::vector<Shape>& inputs) const {
  std::vector<Shape> outputs = Normalization::output_shapes(inputs);
  const Shape& x = inputs[0];
  if (x[1] % groups_ != 0)
    fail_shape("groups " + std::to_string(groups_) + " does not divide the " + std::to_string(x[1]) +
               " channels of input " + shape_str(x) + "; groups must be a divisor of C");
  return outputs;
}

void GroupNorm::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Geometry g = geometry_of(inputs[0]->shape());
  const std::int64_t group_channels = g.channels / groups_;
  const std::int64_t row = group_channels * g.pixels;  // one (sample, group): contiguous in NCHW
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* gamma = values_or_null<T>(affine_parameter("gamma"));
    const T* beta = values_or_null<T>(affine_parameter("beta"));
    parallel_for(g.images * groups_, [&](std::int64_t item) {
      const T* x = inputs[0]->data<T>() + item * row;
      T* y = outputs[0]->data<T>() + item * row;
      const auto [mean, rstd] = row_statistics(x, row, eps());
      for (std::int64_t k = 0; k < group_channels; ++k) {
        const std::int64_t c = item % groups_ * group_channels + k;
        const double scale = static_cast<double>(gamma_of(gamma, c));
        const double shift = beta ? static_cast<double>(beta[c]) : 0.0;
        for (std::int64_t p = 0; p < g.pixels; ++p) {
          const std::int64_t e = k * g.pixels + p;
          y[e] = static_cast<T>((static_cast<double>(x[e]) - mean) * rstd * scale + shift);
        }
      }
    });
  });
}

void GroupNorm::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Geometry g = geometry_of(inputs[0]->shape());
  const std::int64_t group_channels = g.channels / groups_;
  const std::int64_t row = group_channels * g.pixels;
  Parameter* gamma_parameter = affine_parameter("gamma");
  Parameter* beta_parameter = affine_parameter("beta");
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* gamma = values_or_null<T>(gamma_parameter);
    // Per sample: dgamma parts [N, C] and dbeta parts [N, C]; item (n, g)
    // writes the channels of group g in sample n's row.
    std::vector<T> gamma_parts(gamma ? static_cast<std::size_t>(g.images * g.channels) : 0);
    std::vector<T> beta_parts(gamma_parts.size());
    parallel_for(g.images * groups_, [&](std::int64_t item) {
      const T* x = inputs[0]->data<T>() + item * row;
      const T* dy = output_grads[0]->data<T>() + item * row;
      const std::int64_t first_channel = item % groups_ * group_channels;
      const auto [mean, rstd] = row_statistics(x, row, eps());
      if (input_grads[0]) {
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (std::int64_t k = 0; k < group_channels; ++k) {
          const double scale = static_cast<double>(gamma_of(gamma, first_channel + k));
          for (std::int64_t p = 0; p < g.pixels; ++p) {
            const std::int64_t e = k * g.pixels + p;
            const double gradient = static_cast<double>(dy[e]) * scale;
            sum_g += gradient;
            sum_g_xhat += gradient * (static_cast<double>(x[e]) - mean) * rstd;
          }
        }
        const double mean_g = sum_g / static_cast<double>(row);
        const double mean_g_xhat = sum_g_xhat / static_cast<double>(row);
        T* dx = input_grads[0]->data<T>() + item * row;
        for (std::int64_t k = 0; k < group_channels; ++k) {
          const double scale = static_cast<double>(gamma_of(gamma, first_channel + k));
          for (std::int64_t p = 0; p < g.pixels; ++p) {
            const std::int64_t e = k * g.pixels + p;
            const double xhat = (static_cast<double>(x[e]) - mean) * rstd;
            dx[e] = static_cast<T>(rstd * (static_cast<double>(dy[e]) * scale - mean_g - xhat * mean_g_xhat));
          }
        }
      }
      if (!gamma) return;
      const std::int64_t part = item / groups_ * g.channels + first_channel;
      for (std::int64_t k = 0; k < group_channels; ++k) {
        double sum_dy_xhat = 0.0, sum_dy = 0.0;
        for (std::int64_t p = 0; p < g.pixels; ++p) {
          const std::int64_t e = k * g.pixels + p;
          sum_dy_xhat += static_cast<double>(dy[e]) * (static_cast<double>(x[e]) - mean) * rstd;
          sum_dy += static_cast<double>(dy[e]);
        }
        gamma_parts[static_cast<std::size_t>(part + k)] = static_cast<T>(sum_dy_xhat);
        beta_parts[static_cast<std::size_t>(part + k)] = static_cast<T>(sum_dy);
      }
    });
    if (!gamma) return;
    add_in_order(gamma_parts.data(), g.images, g.channels, gradient_or_null<T>(gamma_parameter));
    add_in_order(beta_parts.data(), g.images, g.channels, gradient_or_null<T>(beta_parameter));
  });
}

void register_normalization(Registry& registry) {
  registry.add(
      "LayerNorm", [](LayerConfig& config) { return std::make_unique<LayerNorm>(config); },
      "layer normalization over the channels of each pixel (channels-last LayerNorm on NCHW): "
      "y = (x - mean_c) / sqrt(var_c + eps) * gamma + beta, gamma and beta [C]");
  registry.add(
      "GroupNorm", [](LayerConfig& config) { return std::make_unique<GroupNorm>(config); },
      "group normalization (PyTorch GroupNorm): normalises each sample over the C/groups channels of a group and "
      "all pixels, then y = xhat * gamma + beta per channel, gamma and beta [C]");
}

}  // namespace plexus::layers

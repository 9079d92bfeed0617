#include "gain_unit/gain_unit.h"

#include <cmath>
#include <sstream>

#include "plexus/checked_math.h"

#include "gain_unit/gain_interpolation.h"

namespace plexus::layers {

namespace {

// The largest K accepted: far more rate points than any codec trains.
constexpr std::int64_t kMaxLevels = 4096;

// The elements per (sample, channel): the product of the dimensions after C.
std::int64_t spatial_size(const Shape& shape) {
  std::int64_t size = 1;
  for (std::size_t d = 2; d < shape.size(); ++d)
    size = checked_mul(size, shape[d], "the spatial size of input " + shape_str(shape));
  return size;
}

std::string initializer_name(const std::vector<double>& values) {
  std::ostringstream name;
  name << "per level [";
  for (std::size_t k = 0; k < values.size(); ++k) name << (k ? ", " : "") << values[k];
  name << "]";
  return name.str();
}

}  // namespace

GainUnit::GainUnit(LayerConfig& config) : levels_(config.bounded_integer("levels", 2, kMaxLevels)) {
  initial_log_gains_ = config.numbers("init", {});
  if (config.has("init") && static_cast<std::int64_t>(initial_log_gains_.size()) != levels_)
    config.fail("init", "must have one number per level (levels = " + std::to_string(levels_) + "), got " +
                            std::to_string(initial_log_gains_.size()));
  if (initial_log_gains_.empty()) initial_log_gains_.assign(static_cast<std::size_t>(levels_), 0.0);
}

std::vector<Shape> GainUnit::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2) fail_shape("takes 2 inputs (x, level), got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  const Shape& level = inputs[1];
  if (x.size() < 2)
    fail_shape("input x must be [N, C, ...] with at least 2 dimensions (batch and channels), got " + shape_str(x));
  if (level.size() != 1 || level[0] != x[0])
    fail_shape("input level is " + shape_str(level) + " but must be [" + std::to_string(x[0]) +
               "], one value per sample of x " + shape_str(x));
  if (channels_ > 0 && x[1] != channels_)
    fail_shape("input x " + shape_str(x) + " has " + std::to_string(x[1]) + " channels, but log_gains was created as " +
               shape_str({levels_, channels_}) + " for " + std::to_string(channels_));
  spatial_size(x);  // throws on overflow
  return {x};
}

void GainUnit::create_parameters(const std::vector<Shape>& inputs) {
  channels_ = inputs[0][1];
  const std::vector<double> initial = initial_log_gains_;
  declare_parameter("log_gains", {levels_, channels_},
                    init::custom(initializer_name(initial),
                                 [initial](std::vector<double>& values, const Shape& shape, std::mt19937_64&) {
                                   const std::int64_t channels = shape[1];
                                   for (std::size_t j = 0; j < values.size(); ++j)
                                     values[j] = initial[j / static_cast<std::size_t>(channels)];
                                 }));
}

// y[n, c, ...] = x[n, c, ...] exp(s[n, c]), s interpolated between two levels.
void GainUnit::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  const std::int64_t batch = x.dim(0), channels = x.dim(1), spatial = spatial_size(x.shape());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* log_gains = parameter("log_gains").value.data<T>();
    const T* level = inputs[1]->data<T>();
    const T* in = x.data<T>();
    T* out = outputs[0]->data<T>();
    for (std::int64_t n = 0; n < batch; ++n) {
      const gain::LevelPair<T> pair = gain::level_pair(level[n], levels_);
      for (std::int64_t c = 0; c < channels; ++c) {
        const T gain = std::exp(gain::interpolated_log_gain(log_gains, channels, pair, c));
        const std::int64_t base = (n * channels + c) * spatial;
        for (std::int64_t j = 0; j < spatial; ++j) out[base + j] = in[base + j] * gain;
      }
    }
  });
}

// dx = dy exp(s); dlog_gains[i, c] += (1-t) exp(s) S, dlog_gains[i+1, c] += t exp(s) S,
// S = sum over the spatial positions of dy x (summed in f64).
void GainUnit::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                            const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  const std::int64_t batch = x.dim(0), channels = x.dim(1), spatial = spatial_size(x.shape());
  if (input_grads.size() > 1 && input_grads[1]) input_grads[1]->fill_zero();
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Parameter& log_gains = parameter("log_gains");
    const T* gains = log_gains.value.data<T>();
    T* gains_grad = log_gains.grad.data<T>();
    const T* level = inputs[1]->data<T>();
    const T* in = x.data<T>();
    const T* dy = output_grads[0]->data<T>();
    T* dx = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    for (std::int64_t n = 0; n < batch; ++n) {
      const gain::LevelPair<T> pair = gain::level_pair(level[n], levels_);
      for (std::int64_t c = 0; c < channels; ++c) {
        const T gain = std::exp(gain::interpolated_log_gain(gains, channels, pair, c));
        const std::int64_t base = (n * channels + c) * spatial;
        double sum = 0.0;
        for (std::int64_t j = 0; j < spatial; ++j) {
          sum += static_cast<double>(dy[base + j]) * static_cast<double>(in[base + j]);
          if (dx) dx[base + j] = dy[base + j] * gain;
        }
        const T scaled = static_cast<T>(sum) * gain;
        gains_grad[pair.lower * channels + c] += (T(1) - pair.weight) * scaled;
        gains_grad[(pair.lower + 1) * channels + c] += pair.weight * scaled;
      }
    }
  });
}

void register_gain_unit(Registry& registry) {
  registry.add(
      "GainUnit", [](LayerConfig& config) { return std::make_unique<GainUnit>(config); },
      "y = x * exp(s) per channel, s interpolated between the log-gains of two adjacent rate levels "
      "(inputs x [N, C, ...], level [N]; parameter log_gains [levels, C])");
}

}  // namespace plexus::layers

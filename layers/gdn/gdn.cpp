// GDN / IGDN on the CPU (math in gdn.h). Each image is a [C, P] matrix X
// (P = pixels, the NCHW layout as it lies in memory), so one image is
//   N = gamma (X o X) + beta 1^T        (o: element-wise product)
// and the backward is two more [C, C] x [C, P] products and one [C, P] x [P, C].
#include "gdn/gdn.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <Eigen/Core>

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
  for (std::size_t axis = 2; axis < shape.size(); ++axis) pixels *= shape[axis];
  return {shape[0], shape[1], pixels};
}

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColumnVector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// value = max(stored, bound)^2 - pedestal, element-wise.
template <typename T>
RowMajorMatrix<T> effective(const Tensor& stored, std::int64_t rows, std::int64_t cols, T bound, T pedestal) {
  Eigen::Map<const RowMajorMatrix<T>> s(stored.data<T>(), rows, cols);
  return (s.array().max(bound).square() - pedestal).matrix();
}

// dL/dstored += 2 max(stored, bound) dL/dvalue where the lower bound passes
// the gradient: stored >= bound, or dL/dvalue < 0 (descent pushes it up).
template <typename T>
void accumulate_stored_gradient(const Tensor& stored, Tensor& grad, const RowMajorMatrix<T>& value_grad, T bound) {
  Eigen::Map<const RowMajorMatrix<T>> s(stored.data<T>(), value_grad.rows(), value_grad.cols());
  Eigen::Map<RowMajorMatrix<T>> g(grad.data<T>(), value_grad.rows(), value_grad.cols());
  auto passes = (s.array() >= bound) || (value_grad.array() < T(0));
  g.array() += passes.select(T(2) * s.array().max(bound) * value_grad.array(), T(0));
}

// The forward pass runs on blocks of this many pixels of one image, the items
// of parallel_for with the images, so that one image spreads over every
// thread. A constant, never the thread count: Eigen may sum a product of
// another shape in another order, so fixed blocks keep every output bit the
// same for any number of threads. 1024 pixels make a product long enough to
// run at full speed and keep a block's norm ([C, 1024]) in cache.
constexpr std::int64_t kForwardBlockPixels = kGdnForwardBlockPixels;

}  // namespace

GDN::GDN(LayerConfig& config, bool inverse)
    : inverse_(inverse),
      beta_min_(config.number("beta_min", 1e-6)),
      gamma_init_(config.number("gamma_init", 0.1)),
      reparam_offset_(config.number("reparam_offset", 3.814697265625e-06)) {
  if (!(beta_min_ > 0.0) || !std::isfinite(beta_min_))
    config.fail("beta_min", "must be a finite number > 0, got " + number_text(beta_min_));
  if (!(gamma_init_ >= 0.0) || !std::isfinite(gamma_init_))
    config.fail("gamma_init", "must be a finite number >= 0, got " + number_text(gamma_init_));
  if (!(reparam_offset_ > 0.0) || !std::isfinite(reparam_offset_))
    config.fail("reparam_offset", "must be a finite number > 0, got " + number_text(reparam_offset_));
}

double GDN::beta_bound() const { return std::sqrt(beta_min_ + pedestal()); }

std::vector<Shape> GDN::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() < 2)
    fail_shape("input " + shape_str(x) + " has rank " + std::to_string(x.size()) +
               "; expected [N, C, ...] (rank >= 2, channels on axis 1)");
  if (x[1] < 1) fail_shape("input " + shape_str(x) + " has no channels; expected [N, C, ...] with C >= 1");
  return {x};
}

void GDN::check_channels(const Tensor& x) {
  const std::int64_t expected = parameter("beta").shape[0];
  if (x.ndim() < 2 || x.dim(1) != expected)
    fail_shape("input " + shape_str(x.shape()) + " does not match the parameters, made for [N, " +
               std::to_string(expected) + ", ...]");
}

void GDN::create_parameters(const std::vector<Shape>& inputs) {
  const std::int64_t channels = inputs[0][1];
  const double pedestal = this->pedestal();
  const double gamma_init = gamma_init_;
  // stored = sqrt(max(value + pedestal, pedestal)), the inverse of the
  // reparametrisation, so that the initial values are exactly beta = 1 and
  // gamma = gamma_init * I.
  declare_parameter("beta", {channels},
                    init::custom("gdn_beta(1)", [pedestal](std::vector<double>& v, const Shape&, std::mt19937_64&) {
                      std::fill(v.begin(), v.end(), std::sqrt(1.0 + pedestal));
                    }));
  declare_parameter("gamma", {channels, channels},
                    init::custom("gdn_gamma(" + number_text(gamma_init) + " * I)",
                                 [pedestal, gamma_init](std::vector<double>& v, const Shape& shape, std::mt19937_64&) {
                                   const std::int64_t c = shape[0];
                                   for (std::int64_t i = 0; i < c; ++i)
                                     for (std::int64_t j = 0; j < c; ++j)
                                       v[static_cast<std::size_t>(i * c + j)] =
                                           std::sqrt(std::max((i == j ? gamma_init : 0.0) + pedestal, pedestal));
                                 }));
}

void GDN::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  check_channels(*inputs[0]);
  const Geometry g = geometry_of(inputs[0]->shape());
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T pedestal = static_cast<T>(this->pedestal());
    const ColumnVector<T> beta =
        effective<T>(parameter("beta").value, g.channels, 1, static_cast<T>(beta_bound()), pedestal);
    const RowMajorMatrix<T> gamma =
        effective<T>(parameter("gamma").value, g.channels, g.channels, static_cast<T>(gamma_bound()), pedestal);
    const std::int64_t image_size = g.channels * g.pixels;
    // Pixels before the first block boundary (set_cpu_block_origin), then whole blocks.
    const std::int64_t head =
        std::min(g.pixels, (kForwardBlockPixels - cpu_block_origin_ % kForwardBlockPixels) % kForwardBlockPixels);
    const std::int64_t lead = head > 0 ? 1 : 0;
    const std::int64_t blocks = lead + (g.pixels - head + kForwardBlockPixels - 1) / kForwardBlockPixels;
    parallel_for(g.images * blocks, [&](std::int64_t item) {  // pixels are independent
      const std::int64_t b = item / blocks, block = item % blocks;
      const std::int64_t first = block < lead ? 0 : head + (block - lead) * kForwardBlockPixels;
      const std::int64_t count = block < lead ? head : std::min(kForwardBlockPixels, g.pixels - first);
      const std::int64_t offset = b * image_size + first;
      const Eigen::OuterStride<> stride(g.pixels);
      Eigen::Map<const RowMajorMatrix<T>, 0, Eigen::OuterStride<>> x(inputs[0]->data<T>() + offset, g.channels, count,
                                                                     stride);
      Eigen::Map<RowMajorMatrix<T>, 0, Eigen::OuterStride<>> y(outputs[0]->data<T>() + offset, g.channels, count,
                                                               stride);
      RowMajorMatrix<T> norm = gamma * x.array().square().matrix();
      norm.colwise() += beta;
      if (inverse_) y.array() = x.array() * norm.array().sqrt();
      else y.array() = x.array() * norm.array().rsqrt();
    });
  });
}

void GDN::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                       const MutableTensors& input_grads) {
  check_channels(*inputs[0]);
  const Geometry g = geometry_of(inputs[0]->shape());
  Parameter& beta_parameter = parameter("beta");
  Parameter& gamma_parameter = parameter("gamma");
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T pedestal = static_cast<T>(this->pedestal());
    const T beta_bound = static_cast<T>(this->beta_bound());
    const T gamma_bound = static_cast<T>(this->gamma_bound());
    const ColumnVector<T> beta = effective<T>(beta_parameter.value, g.channels, 1, beta_bound, pedestal);
    const RowMajorMatrix<T> gamma = effective<T>(gamma_parameter.value, g.channels, g.channels, gamma_bound, pedestal);
    // Gradients with respect to the effective beta and gamma, per image, then
    // summed over the batch in image order (the same for any thread count).
    const std::int64_t channels = g.channels;
    std::vector<T> beta_parts(static_cast<std::size_t>(g.images * channels));
    std::vector<T> gamma_parts(static_cast<std::size_t>(g.images * channels * channels));
    const std::int64_t image_size = g.channels * g.pixels;
    parallel_for(g.images, [&](std::int64_t b) {
      Eigen::Map<const RowMajorMatrix<T>> x(inputs[0]->data<T>() + b * image_size, g.channels, g.pixels);
      Eigen::Map<const RowMajorMatrix<T>> dy(output_grads[0]->data<T>() + b * image_size, g.channels, g.pixels);
      const RowMajorMatrix<T> x_squared = x.array().square().matrix();
      RowMajorMatrix<T> norm = gamma * x_squared;
      norm.colwise() += beta;
      const auto root = norm.array().rsqrt();  // r = n^-1/2
      // q = dL/dn and the factor y/x that dy meets in dx.
      RowMajorMatrix<T> q;
      RowMajorMatrix<T> scale;
      if (inverse_) {
        q = (T(0.5) * dy.array() * x.array() * root).matrix();
        scale = norm.array().sqrt().matrix();
      } else {
        q = (T(-0.5) * dy.array() * x.array() * root.cube()).matrix();
        scale = root.matrix();
      }
      if (input_grads[0]) {
        Eigen::Map<RowMajorMatrix<T>> dx(input_grads[0]->data<T>() + b * image_size, g.channels, g.pixels);
        dx.array() = dy.array() * scale.array() + T(2) * x.array() * (gamma.transpose() * q).array();
      }
      Eigen::Map<ColumnVector<T>>(beta_parts.data() + b * channels, channels) = q.rowwise().sum();
      Eigen::Map<RowMajorMatrix<T>>(gamma_parts.data() + b * channels * channels, channels, channels).noalias() =
          q * x_squared.transpose();
    });
    RowMajorMatrix<T> beta_grad = RowMajorMatrix<T>::Zero(channels, 1);
    RowMajorMatrix<T> gamma_grad = RowMajorMatrix<T>::Zero(channels, channels);
    add_in_order(beta_parts.data(), g.images, channels, beta_grad.data());
    add_in_order(gamma_parts.data(), g.images, channels * channels, gamma_grad.data());
    accumulate_stored_gradient<T>(beta_parameter.value, beta_parameter.grad, beta_grad, beta_bound);
    accumulate_stored_gradient<T>(gamma_parameter.value, gamma_parameter.grad, gamma_grad, gamma_bound);
  });
}

void register_gdn(Registry& registry) {
  registry.add(
      "GDN", [](LayerConfig& config) { return std::make_unique<GDN>(config, false); },
      "generalized divisive normalization: y_i = x_i / sqrt(beta_i + sum_j gamma_ij x_j^2)");
  registry.add(
      "IGDN", [](LayerConfig& config) { return std::make_unique<GDN>(config, true); },
      "inverse GDN: y_i = x_i * sqrt(beta_i + sum_j gamma_ij x_j^2)");
}

}  // namespace plexus::layers

#include "factorized_entropy_model/factorized_entropy_model.h"

#include <cmath>
#include <sstream>

#include <Eigen/Core>

namespace plexus::layers {

namespace {

constexpr int kLayers = FactorizedEntropyModel::kLayers;
constexpr auto kWidths = FactorizedEntropyModel::kWidths;

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <typename T>
using Column = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using RowArray = Eigen::Array<T, 1, Eigen::Dynamic>;
template <typename T>
using RowMajorMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <typename T>
T softplus(T x) {  // log(1 + e^x) without overflow
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <typename T>
T logistic(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Elements of input [N, C, ...]: channel c's elements are N runs of `inner`
// contiguous values, run n starting at (n C + c) inner.
struct ChannelLayout {
  std::int64_t batch;
  std::int64_t channels;
  std::int64_t inner;
  std::int64_t count() const { return batch * inner; }
  std::int64_t offset(std::int64_t n, std::int64_t c) const { return (n * channels + c) * inner; }
};

ChannelLayout layout_of(const Shape& shape) {
  std::int64_t inner = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) inner *= shape[axis];
  return {shape[0], shape[1], inner};
}

// Channel c's elements of `data`, as a row [1, count].
template <typename T>
RowArray<T> gather(const T* data, const ChannelLayout& layout, std::int64_t c) {
  RowArray<T> row(layout.count());
  for (std::int64_t n = 0; n < layout.batch; ++n)
    for (std::int64_t s = 0; s < layout.inner; ++s) row(n * layout.inner + s) = data[layout.offset(n, c) + s];
  return row;
}

template <typename T>
void scatter(const RowArray<T>& row, const ChannelLayout& layout, std::int64_t c, T* data) {
  for (std::int64_t n = 0; n < layout.batch; ++n)
    for (std::int64_t s = 0; s < layout.inner; ++s) data[layout.offset(n, c) + s] = row(n * layout.inner + s);
}

// One channel's parameters as the chain uses them: H^(k) = softplus(matrix_k)
// [out_k, in_k], b^(k) [out_k], a^(k) = tanh(factor_k) [out_k].
template <typename T>
struct ChannelDensity {
  std::array<Matrix<T>, kLayers> H;
  std::array<Column<T>, kLayers> b;
  std::array<Column<T>, kLayers - 1> a;
};

// dL/dH^(k), dL/db^(k), dL/da^(k) of one channel, summed over its elements.
template <typename T>
struct ChannelDensityGradient {
  std::array<Matrix<T>, kLayers> H;
  std::array<Column<T>, kLayers> b;
  std::array<Column<T>, kLayers - 1> a;

  ChannelDensityGradient() {
    for (int k = 0; k < kLayers; ++k) {
      H[k] = Matrix<T>::Zero(kWidths[k + 1], kWidths[k]);
      b[k] = Column<T>::Zero(kWidths[k + 1]);
      if (k < kLayers - 1) a[k] = Column<T>::Zero(kWidths[k + 1]);
    }
  }
};

// The activations of one evaluation of the chain over a row of elements.
template <typename T>
struct ChainTrace {
  std::array<Matrix<T>, kLayers> inputs;      // v_k, the input of f_k: [in_k, count]
  std::array<Matrix<T>, kLayers - 1> tanh_z;  // tanh(z_k), z_k = H^(k) v_k + b^(k): [out_k, count]
  RowArray<T> logits;                         // z_K: the cumulative before its sigmoid
};

// Logits of c at every element of x: v_0 = x, z_k = H^(k) v_k + b^(k),
// v_{k+1} = z_k + a^(k) ∘ tanh(z_k), logit = z_K.
template <typename T>
ChainTrace<T> chain_forward(const ChannelDensity<T>& density, const RowArray<T>& x) {
  ChainTrace<T> trace;
  Matrix<T> v = x.matrix();
  for (int k = 0; k < kLayers; ++k) {
    trace.inputs[k] = v;
    Matrix<T> z = (density.H[k] * v).colwise() + density.b[k];
    if (k == kLayers - 1) {
      trace.logits = z.array();
      break;
    }
    trace.tanh_z[k] = z.array().tanh().matrix();
    v = (z.array() + trace.tanh_z[k].array().colwise() * density.a[k].array()).matrix();
  }
  return trace;
}

// Back through the chain from dL/dlogit: accumulates the channel's parameter
// gradients and returns dL/dx.
//   through g_k: dL/dz_k = dL/dv_{k+1} ∘ (1 + a^(k) ∘ (1 - tanh^2 z_k)),  dL/da^(k) += dL/dv_{k+1} ∘ tanh z_k
//   through the affine map: dL/db^(k) += dL/dz_k,  dL/dH^(k) += dL/dz_k v_k^T,  dL/dv_k = H^(k)T dL/dz_k
template <typename T>
RowArray<T> chain_backward(const ChannelDensity<T>& density, const ChainTrace<T>& trace, const RowArray<T>& logit_grad,
                           ChannelDensityGradient<T>& gradient) {
  Matrix<T> grad = logit_grad.matrix();  // dL/dz_K
  for (int k = kLayers - 1; k >= 0; --k) {
    if (k < kLayers - 1) {  // grad holds dL/dv_{k+1}
      const auto t = trace.tanh_z[k].array();
      gradient.a[k] += (grad.array() * t).rowwise().sum().matrix();
      grad = (grad.array() * (((T(1) - t.square()).colwise() * density.a[k].array()) + T(1))).matrix();
    }
    gradient.b[k] += grad.rowwise().sum();
    gradient.H[k] += grad * trace.inputs[k].transpose();
    grad = density.H[k].transpose() * grad;
  }
  return grad.array();
}

// p = |sigmoid(s u) - sigmoid(s l)|, s = -sign(u + l) (+1 at 0), and the
// partial derivatives dp/du = sigmoid'(u), dp/dl = -sigmoid'(l) (u >= l).
template <typename T>
struct Likelihood {
  RowArray<T> p, dp_du, dp_dl;
};

template <typename T>
Likelihood<T> likelihood_of(const RowArray<T>& upper, const RowArray<T>& lower) {
  const Eigen::Index count = upper.size();
  RowArray<T> sign =
      ((upper + lower) > T(0)).select(RowArray<T>::Constant(count, T(-1)), RowArray<T>::Constant(count, T(1)));
  RowArray<T> sigmoid_upper = (sign * upper).unaryExpr([](T v) { return logistic(v); });
  RowArray<T> sigmoid_lower = (sign * lower).unaryExpr([](T v) { return logistic(v); });
  Likelihood<T> result;
  result.p = (sigmoid_upper - sigmoid_lower).abs();
  // sigmoid'(x) = sigmoid(x) (1 - sigmoid(x)) is even, so sigmoid'(s u) = sigmoid'(u).
  result.dp_du = sigmoid_upper * (T(1) - sigmoid_upper);
  result.dp_dl = -sigmoid_lower * (T(1) - sigmoid_lower);
  return result;
}

}  // namespace

FactorizedEntropyModel::FactorizedEntropyModel(LayerConfig& config) {
  const std::vector<std::int64_t> filters = config.integers("filters", {3, 3, 3});
  if (filters != std::vector<std::int64_t>{3, 3, 3}) {
    std::ostringstream text;
    for (std::size_t i = 0; i < filters.size(); ++i) text << (i ? ", " : "") << filters[i];
    config.fail("filters",
                "must be [3, 3, 3] (the only widths implemented, Ballé et al. 2018), got [" + text.str() + "]");
  }
  init_scale_ = config.number("init_scale", 10.0);
  if (!(init_scale_ > 0.0) || !std::isfinite(init_scale_))
    config.fail("init_scale", "must be a finite number > 0, got " + number_text(init_scale_));
  likelihood_bound_ = config.number("likelihood_bound", 1e-9);
  if (!(likelihood_bound_ >= 0.0 && likelihood_bound_ < 1.0))
    config.fail("likelihood_bound", "must be in [0, 1), got " + number_text(likelihood_bound_));
}

std::vector<Shape> FactorizedEntropyModel::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& shape = inputs[0];
  if (shape.size() < 2) fail_shape("input must be [N, C, ...] (rank >= 2), got " + shape_str(shape));
  if (shape[1] < 1) fail_shape("input " + shape_str(shape) + " has no channels (axis 1)");
  if (channels_ >= 0 && shape[1] != channels_)
    fail_shape("input " + shape_str(shape) + " has " + std::to_string(shape[1]) +
               " channels, but the parameters were made for " + std::to_string(channels_));
  return {shape};
}

void FactorizedEntropyModel::create_parameters(const std::vector<Shape>& inputs) {
  channels_ = inputs[0][1];
  const double scale = std::pow(init_scale_, 1.0 / kLayers);
  for (int k = 0; k < kLayers; ++k) {
    const std::int64_t in = kWidths[k], out = kWidths[k + 1];
    // softplus^-1(1 / (scale out)): each layer starts as a 1/scale ramp split over its outputs.
    const double matrix_init = std::log(std::expm1(1.0 / scale / static_cast<double>(out)));
    matrix_[k] = &declare_parameter("matrix" + std::to_string(k), {channels_, out, in}, init::constant(matrix_init));
    bias_[k] = &declare_parameter("bias" + std::to_string(k), {channels_, out, 1}, init::uniform(-0.5, 0.5));
    if (k < kLayers - 1)
      factor_[k] = &declare_parameter("factor" + std::to_string(k), {channels_, out, 1}, init::constant(0.0));
  }
}

namespace {

// The parameter tensors (sharing storage), or host f64 copies of them.
struct DensityTensors {
  std::array<Tensor, kLayers> matrix, bias;
  std::array<Tensor, kLayers - 1> factor;
};

DensityTensors values_of(const std::array<Parameter*, kLayers>& matrix, const std::array<Parameter*, kLayers>& bias,
                         const std::array<Parameter*, kLayers - 1>& factor) {
  DensityTensors tensors;
  for (int k = 0; k < kLayers; ++k) {
    tensors.matrix[k] = matrix[k]->value;
    tensors.bias[k] = bias[k]->value;
    if (k < kLayers - 1) tensors.factor[k] = factor[k]->value;
  }
  return tensors;
}

template <typename T>
ChannelDensity<T> channel_density(const DensityTensors& tensors, std::int64_t c) {
  ChannelDensity<T> density;
  for (int k = 0; k < kLayers; ++k) {
    const int in = kWidths[k], out = kWidths[k + 1];
    density.H[k] =
        RowMajorMap<T>(tensors.matrix[k].data<T>() + c * out * in, out, in).unaryExpr([](T v) { return softplus(v); });
    density.b[k] = Eigen::Map<const Column<T>>(tensors.bias[k].data<T>() + c * out, out);
    if (k < kLayers - 1)
      density.a[k] = Eigen::Map<const Column<T>>(tensors.factor[k].data<T>() + c * out, out).array().tanh().matrix();
  }
  return density;
}

}  // namespace

void FactorizedEntropyModel::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const ChannelLayout layout = layout_of(inputs[0]->shape());
    const T bound = static_cast<T>(likelihood_bound_);
    for (std::int64_t c = 0; c < layout.channels; ++c) {
      const ChannelDensity<T> density = channel_density<T>(values_of(matrix_, bias_, factor_), c);
      const RowArray<T> y = gather(inputs[0]->data<T>(), layout, c);
      const ChainTrace<T> upper = chain_forward(density, RowArray<T>(y + T(0.5)));
      const ChainTrace<T> lower = chain_forward(density, RowArray<T>(y - T(0.5)));
      const Likelihood<T> likelihood = likelihood_of(upper.logits, lower.logits);
      scatter(RowArray<T>(likelihood.p.max(bound)), layout, c, outputs[0]->data<T>());
    }
  });
}

void FactorizedEntropyModel::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                          const ConstTensors& output_grads, const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const ChannelLayout layout = layout_of(inputs[0]->shape());
    const T bound = static_cast<T>(likelihood_bound_);
    for (std::int64_t c = 0; c < layout.channels; ++c) {
      const ChannelDensity<T> density = channel_density<T>(values_of(matrix_, bias_, factor_), c);
      const RowArray<T> y = gather(inputs[0]->data<T>(), layout, c);
      const RowArray<T> output_grad = gather(output_grads[0]->data<T>(), layout, c);
      const ChainTrace<T> upper = chain_forward(density, RowArray<T>(y + T(0.5)));
      const ChainTrace<T> lower = chain_forward(density, RowArray<T>(y - T(0.5)));
      const Likelihood<T> likelihood = likelihood_of(upper.logits, lower.logits);
      // LowerBound, identity if towards: pass where p >= bound or where descent raises p.
      const RowArray<T> p_grad =
          (likelihood.p >= bound || output_grad < T(0)).select(output_grad, RowArray<T>::Zero(y.size()));

      ChannelDensityGradient<T> gradient;
      const RowArray<T> x_grad = chain_backward(density, upper, RowArray<T>(p_grad * likelihood.dp_du), gradient) +
                                 chain_backward(density, lower, RowArray<T>(p_grad * likelihood.dp_dl), gradient);
      if (input_grads[0]) scatter(x_grad, layout, c, input_grads[0]->data<T>());

      // Chain rule through the reparametrisations, accumulated into p.grad.
      for (int k = 0; k < kLayers; ++k) {
        const int in = kWidths[k], out = kWidths[k + 1];
        const T* matrix = matrix_[k]->value.data<T>() + c * out * in;
        T* matrix_grad = matrix_[k]->grad.data<T>() + c * out * in;
        for (int i = 0; i < out; ++i)
          for (int j = 0; j < in; ++j)  // d softplus(m) / dm = sigmoid(m)
            matrix_grad[i * in + j] += gradient.H[k](i, j) * logistic(matrix[i * in + j]);
        T* bias_grad = bias_[k]->grad.data<T>() + c * out;
        for (int i = 0; i < out; ++i) bias_grad[i] += gradient.b[k](i);
        if (k < kLayers - 1) {
          T* factor_grad = factor_[k]->grad.data<T>() + c * out;
          for (int i = 0; i < out; ++i)  // d tanh(f) / df = 1 - a^2
            factor_grad[i] += gradient.a[k](i) * (T(1) - density.a[k](i) * density.a[k](i));
        }
      }
    }
  });
}

std::vector<double> FactorizedEntropyModel::cumulative_logits(const std::vector<double>& points,
                                                              std::int64_t per_channel) const {
  if (channels_ < 0) throw Error("FactorizedEntropyModel::cumulative_logits: the layer has no parameters yet");
  if (per_channel < 0 || static_cast<std::int64_t>(points.size()) != channels_ * per_channel)
    throw Error("FactorizedEntropyModel::cumulative_logits: " + std::to_string(points.size()) + " points for " +
                std::to_string(channels_) + " channels of " + std::to_string(per_channel));
  DensityTensors host = values_of(matrix_, bias_, factor_);
  for (auto* group : {&host.matrix, &host.bias})
    for (Tensor& t : *group) t = t.to(Device::cpu()).to(DType::f64);
  for (Tensor& t : host.factor) t = t.to(Device::cpu()).to(DType::f64);
  std::vector<double> logits(points.size());
  for (std::int64_t c = 0; c < channels_; ++c) {
    const ChannelDensity<double> density = channel_density<double>(host, c);
    const RowArray<double> x = Eigen::Map<const RowArray<double>>(points.data() + c * per_channel, per_channel);
    Eigen::Map<RowArray<double>>(logits.data() + c * per_channel, per_channel) = chain_forward(density, x).logits;
  }
  return logits;
}

void register_factorized_entropy_model(Registry& registry) {
  registry.add(
      "FactorizedEntropyModel", [](LayerConfig& config) { return std::make_unique<FactorizedEntropyModel>(config); },
      "per-channel learned density (Ballé et al. 2018): likelihoods c(y + 1/2) - c(y - 1/2)");
}

}  // namespace plexus::layers

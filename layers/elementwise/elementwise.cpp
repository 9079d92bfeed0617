// CPU passes of the element-wise layers (formulas in elementwise_ops.h): each
// op's formula applied to Eigen maps of whole tensors, so Eigen vectorises
// it. Also each layer type's params, and their registration.
#include "elementwise/elementwise.h"

#include <cmath>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include "broadcast.h"

namespace plexus::layers {

namespace {

using namespace elementwise;

template <typename T>
using Values = Eigen::Array<T, Eigen::Dynamic, 1>;

// A tensor's elements as an Eigen array, read-only or to write.
template <typename T>
Eigen::Map<const Values<T>> values_of(const Tensor& tensor) {
  return {tensor.data<T>(), tensor.numel()};
}
template <typename T>
Eigen::Map<Values<T>> values_of(Tensor& tensor) {
  return {tensor.data<T>(), tensor.numel()};
}

// A ReLU, and a LeakyReLU of slope >= 0, are activations a convolution or
// sum before them may apply (FusedActivation): their derivative's [x > 0]
// is [y > 0]. A negative slope flips the sign; the other ops are no such
// activation.
FusedActivation fused_activation_of(const ReLU&) { return {true, 0.0}; }
FusedActivation fused_activation_of(const LeakyReLU& op) {
  return op.negative_slope >= 0 ? FusedActivation{true, op.negative_slope} : FusedActivation{};
}
template <typename Op>
FusedActivation fused_activation_of(const Op&) {
  return {};
}

// ReLU's CPU forward may write over its input (LayerTraits::forward_in_place):
// Eigen reads each x[i] before it writes y[i]. Any unary op here could say
// so; ReLU alone does, which keeps the memory plans of inference nets as
// they are.
bool in_place_on_cpu(const ReLU&) { return true; }
template <typename Op>
bool in_place_on_cpu(const Op&) {
  return false;
}

// The factories: each reads its layer type's params into its op.
std::unique_ptr<Layer> layer_of(Op op) { return std::make_unique<ElementwiseLayer>(op); }

LeakyReLU read_leaky_relu(LayerConfig& config) {
  const double slope = config.number("negative_slope", 0.01);
  if (!std::isfinite(slope)) config.fail("negative_slope", "must be a finite number, got " + std::to_string(slope));
  return LeakyReLU{slope};
}

Tanh read_tanh(LayerConfig& config) {
  const double scale = config.number("scale", 1.0);
  if (!std::isfinite(scale) || scale == 0)
    config.fail("scale", "must be a finite non-zero number, got " + std::to_string(scale));
  return Tanh{scale};
}

Op read_gelu(LayerConfig& config) {
  const std::string approximate = config.text("approximate", "none");
  if (approximate == "none") return GELU{};
  if (approximate == "tanh") return GELUTanh{};
  config.fail("approximate", "must be \"none\" (the exact erf form) or \"tanh\", got \"" + approximate + "\"");
}

// A binary op's partial derivatives where its inputs broadcast: dL/da
// (x_is_a) or dL/db, each summed over the dimensions its input is
// broadcast along.
template <typename T, typename Op>
void broadcast_input_grad(const Op& op, const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& dx, bool x_is_a) {
  const Tensor &x = x_is_a ? a : b, &other = x_is_a ? b : a;
  const T *x_values = x.data<T>(), *other_values = other.data<T>(), *dy_values = dy.data<T>();
  broadcast::reduce_cpu(dx.data<T>(), broadcast::reduction_walk(x.shape(), other.shape(), dy.shape()),
                        [&](long long j, long long y_offset, long long other_offset) {
                          const T g = dy_values[y_offset];
                          return x_is_a ? op.grad_a(x_values[j], other_values[other_offset], g)
                                        : op.grad_b(other_values[other_offset], x_values[j], g);
                        });
}

}  // namespace

std::vector<Shape> ElementwiseLayer::output_shapes(const std::vector<Shape>& inputs) const {
  const std::size_t count = std::visit([](const auto& op) -> std::size_t { return op.inputs; }, op_);
  if (inputs.size() != count)
    fail_shape("takes " + std::to_string(count) + (count == 1 ? " input" : " inputs") + ", got " +
               std::to_string(inputs.size()));
  if (count == 1) return {inputs[0]};
  const broadcast::BroadcastShape output = broadcast::broadcast_shape(inputs);
  if (!output.error.empty())
    fail_shape(output.error + "; " + type() +
               " needs inputs of one shape, or of one rank with each size the output's or 1 (broadcasting)");
  return {output.shape};
}

LayerTraits ElementwiseLayer::traits(Device device) const {
  LayerTraits traits;
  traits.has_cuda = PLEXUS_WITH_CUDA;
  traits.cuda_graph_capturable = true;
  traits.stores_bf16 = device.is_cuda();
  traits.forward_in_place = device.is_cpu() && std::visit([](const auto& op) { return in_place_on_cpu(op); }, op_);
  traits.fused_activation = std::visit([](const auto& op) { return fused_activation_of(op); }, op_);
  return traits;
}

// A binary op's inputs of two shapes broadcast (broadcast.h): the op's
// formula one element at a time, along the index walk.
void ElementwiseLayer::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  std::visit(
      [&](const auto& op) {
        dispatch_float(inputs[0]->dtype(), [&](auto zero) {
          using T = decltype(zero);
          if constexpr (elementwise::is_unary<decltype(op)>) {
            values_of<T>(*outputs[0]) = op.forward(values_of<T>(*inputs[0]));
          } else if (inputs[0]->shape() != inputs[1]->shape()) {
            const Tensor &a = *inputs[0], &b = *inputs[1];
            broadcast::forward_cpu(a.data<T>(), b.data<T>(), outputs[0]->data<T>(),
                                   broadcast::forward_walk(a.shape(), b.shape(), outputs[0]->shape()),
                                   [&](T a_value, T b_value) { return op.forward(a_value, b_value); });
          } else {
            values_of<T>(*outputs[0]) = op.forward(values_of<T>(*inputs[0]), values_of<T>(*inputs[1]));
          }
        });
      },
      op_);
}

// A unary op's derivative at x, or at y (backward_reads_output); a binary
// op's two partial derivatives, each where its gradient is wanted.
void ElementwiseLayer::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors& outputs,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  std::visit(
      [&](const auto& op) {
        if constexpr (elementwise::is_unary<decltype(op)>) {
          if (!input_grads[0]) return;
          const Tensor& at = std::decay_t<decltype(op)>::backward_reads_output ? *outputs[0] : *inputs[0];
          dispatch_float(at.dtype(), [&](auto zero) {
            using T = decltype(zero);
            values_of<T>(*input_grads[0]) = op.backward(values_of<T>(at), values_of<T>(*output_grads[0]));
          });
        } else {
          dispatch_float(inputs[0]->dtype(), [&](auto zero) {
            using T = decltype(zero);
            if (inputs[0]->shape() != inputs[1]->shape()) {
              for (int k = 0; k < 2; ++k)
                if (input_grads[k])
                  broadcast_input_grad<T>(op, *inputs[0], *inputs[1], *output_grads[0], *input_grads[k], k == 0);
              return;
            }
            const auto a = values_of<T>(*inputs[0]), b = values_of<T>(*inputs[1]);
            const auto dy = values_of<T>(*output_grads[0]);
            if (input_grads[0]) values_of<T>(*input_grads[0]) = op.grad_a(a, b, dy);
            if (input_grads[1]) values_of<T>(*input_grads[1]) = op.grad_b(a, b, dy);
          });
        }
      },
      op_);
}

void register_elementwise(Registry& registry) {
  registry.add(
      "ReLU", [](LayerConfig&) { return layer_of(ReLU{}); }, "y = max(x, 0), element-wise");
  registry.add(
      "LeakyReLU", [](LayerConfig& config) { return layer_of(read_leaky_relu(config)); },
      "y = x for x > 0, negative_slope * x otherwise, element-wise");
  registry.add(
      "Abs", [](LayerConfig&) { return layer_of(Abs{}); }, "y = |x|, element-wise");
  registry.add(
      "Sigmoid", [](LayerConfig&) { return layer_of(Sigmoid{}); }, "y = 1 / (1 + exp(-x)), element-wise");
  registry.add(
      "Tanh", [](LayerConfig& config) { return layer_of(read_tanh(config)); }, "y = scale * tanh(x), element-wise");
  registry.add(
      "GELU", [](LayerConfig& config) { return layer_of(read_gelu(config)); },
      "y = x * Phi(x) (Phi: the standard normal CDF; approximate \"tanh\": PyTorch's tanh form), element-wise");
  registry.add(
      "Mul", [](LayerConfig&) { return layer_of(Mul{}); },
      "y = a * b, element-wise, two inputs of one shape or broadcast along dimensions of size 1 (gating, scaling)");
}

}  // namespace plexus::layers

#include "plexus/layer.h"

namespace plexus {

void Layer::create_parameters(const std::vector<Shape>&) {}

LayerTraits Layer::traits(Device) const { return {}; }

std::string Layer::who() const { return "node '" + name_ + "' (" + type_ + ")"; }

void Layer::fail_shape(const std::string& message) const { throw ShapeError(who() + ": " + message); }

void Layer::check_device(const Context& ctx, const ConstTensors& tensors, const char* role) const {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] && tensors[i]->defined() && tensors[i]->device() != ctx.device())
      throw DeviceError(who() + ": " + role + " " + std::to_string(i) + " is " + tensors[i]->describe() +
                        " but the context runs on " + ctx.device().str());
  }
}

template <class Tensors>
void Layer::check_storage(const Context& ctx, const Tensors& tensors, const char* role) const {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i] || !tensors[i]->defined() || tensors[i]->dtype() != DType::bf16) continue;
    const std::string tensor = std::string(role) + " " + std::to_string(i) + " is " + tensors[i]->describe();
    if (!traits(ctx.device()).takes_bf16())
      throw ConfigError(who() + ": " + tensor + ", but this layer takes no bf16 tensors on " + ctx.device().str() +
                        " (LayerTraits::accepts_bf16)");
    for (const auto& p : parameters_)
      if (p->value.defined() && p->value.dtype() != DType::f32)
        throw ConfigError(who() + ": " + tensor + " with " + dtype_name(p->value.dtype()) +
                          " parameters; bf16 activations go with f32 parameters only");
  }
}

void Layer::forward(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs,
                    const ForwardOptions& options) {
  check_device(ctx, inputs, "input");
  check_storage(ctx, inputs, "input");
  check_storage(ctx, outputs, "output");
  // The kernels read the options through forward_options() for this call only.
  struct OptionsForThisCall {
    ForwardOptions& held;
    ~OptionsForThisCall() { held = ForwardOptions{}; }
  } reset{forward_options_};
  forward_options_ = options;
  if (ctx.device().is_cuda()) {
    if (!traits(ctx.device()).has_cuda)
      throw DeviceError("layer " + who() + " has no CUDA kernel; run it with --device cpu");
    forward_cuda(ctx, inputs, outputs);
  } else {
    forward_cpu(ctx, inputs, outputs);
  }
}

void Layer::backward(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) {
  check_device(ctx, output_grads, "output gradient");
  check_storage(ctx, inputs, "input");
  check_storage(ctx, output_grads, "output gradient");
  check_storage(ctx, input_grads, "input gradient");
  if (ctx.device().is_cuda()) {
    if (!traits(ctx.device()).has_cuda)
      throw DeviceError("layer " + who() + " has no CUDA kernel; run it with --device cpu");
    backward_cuda(ctx, inputs, outputs, output_grads, input_grads);
  } else {
    backward_cpu(ctx, inputs, outputs, output_grads, input_grads);
  }
}

void Layer::forward_cuda(Context&, const ConstTensors&, const MutableTensors&) {
  throw DeviceError("layer " + who() + " has no CUDA kernel; run it with --device cpu");
}

void Layer::backward_cuda(Context&, const ConstTensors&, const ConstTensors&, const ConstTensors&,
                          const MutableTensors&) {
  throw DeviceError("layer " + who() + " has no CUDA kernel; run it with --device cpu");
}

Parameter& Layer::declare_parameter(const std::string& name, Shape shape, Initializer initializer) {
  for (auto& p : parameters_)
    if (p->name == name) throw Error(who() + ": parameter '" + name + "' declared twice");
  auto parameter = std::make_unique<Parameter>();
  parameter->name = name;
  parameter->shape = std::move(shape);
  parameter->initializer = std::move(initializer);
  parameters_.push_back(std::move(parameter));
  return *parameters_.back();
}

Parameter& Layer::declare_buffer(const std::string& name, Shape shape, Initializer initializer) {
  Parameter& buffer = declare_parameter(name, std::move(shape), std::move(initializer));
  buffer.trainable = false;
  return buffer;
}

void Layer::after_update(Context&, std::int64_t) {}

std::vector<Parameter*> Layer::parameters() {
  std::vector<Parameter*> result;
  for (auto& p : parameters_) result.push_back(p.get());
  return result;
}

Parameter& Layer::parameter(const std::string& name) {
  for (auto& p : parameters_)
    if (p->name == name) return *p;
  throw Error(who() + " has no parameter '" + name + "'");
}

void Layer::initialize_parameters(DType dtype, Device device, std::mt19937_64& rng) {
  for (auto& p : parameters_) {
    std::vector<double> values(static_cast<std::size_t>(shape_numel(p->shape)));
    p->initializer.fill(values, p->shape, rng);
    p->value = Tensor::from_values(values, p->shape, dtype, device);
    p->grad = Tensor(p->shape, dtype, device);
  }
}

void Layer::allocate_parameters(DType dtype, Device device) {
  for (auto& p : parameters_) {
    p->value = Tensor(p->shape, dtype, device);
    p->grad = Tensor();
  }
}

}  // namespace plexus

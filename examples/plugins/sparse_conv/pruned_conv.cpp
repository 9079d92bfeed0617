// PrunedConv2d / PrunedConvTranspose2d (math in pruned_conv.h).
#include "pruned_conv.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "builtin_layer.h"
#include "plexus/error.h"
#include "plexus/tensor_ops.h"

namespace sparse_conv {

namespace {

// The params of the built-in layer: those given, passed through unchanged,
// so it applies its own defaults and checks.
nlohmann::json dense_params(plexus::LayerConfig& config, const std::string& dense_type) {
  nlohmann::json params = nlohmann::json::object();
  std::vector<std::string> integer_keys{"out_channels", "kernel", "stride", "padding"};
  if (dense_type == "ConvTranspose2d") integer_keys.push_back("output_padding");
  for (const std::string& key : integer_keys)
    if (config.has(key)) params[key] = config.integer(key);
  if (config.has("bias")) params["bias"] = config.boolean("bias");
  return params;
}

}  // namespace

PrunedConv::PrunedConv(plexus::LayerConfig& config, const std::string& dense_type) {
  const nlohmann::json params = dense_params(config, dense_type);
  has_bias_ = params.value("bias", true);
  schedule_.final_sparsity = config.number("sparsity");
  if (!(schedule_.final_sparsity >= 0.0 && schedule_.final_sparsity < 1.0)) {
    std::ostringstream value;
    value << schedule_.final_sparsity;
    config.fail("sparsity", "must be in [0, 1), got " + value.str());
  }
  schedule_.start_step = config.bounded_integer("start_step", 0, 0, std::int64_t{1} << 40);
  schedule_.end_step = config.bounded_integer("end_step", schedule_.start_step, 0, std::int64_t{1} << 40);
  if (schedule_.end_step < schedule_.start_step)
    config.fail("end_step", "must be >= start_step (" + std::to_string(schedule_.start_step) + "), got " +
                                std::to_string(schedule_.end_step));
  schedule_.every = config.bounded_integer("prune_every", 100, 1, std::int64_t{1} << 40);
  dense_ = make_builtin_layer(dense_type, config.node_name(), config.type(), params);
}

std::vector<plexus::Shape> PrunedConv::output_shapes(const std::vector<plexus::Shape>& inputs) const {
  return dense_->output_shapes(inputs);
}

void PrunedConv::create_parameters(const std::vector<plexus::Shape>& inputs) {
  dense_->create_parameters(inputs);
  const plexus::Parameter& weight = dense_->parameter("weight");
  declare_parameter("weight", weight.shape, weight.initializer);
  if (has_bias_) {
    const plexus::Parameter& bias = dense_->parameter("bias");
    declare_parameter("bias", bias.shape, bias.initializer);
  }
  declare_buffer("mask", weight.shape, plexus::init::constant(1.0));
}

void PrunedConv::bind_dense(plexus::Context& ctx) {
  plexus::Parameter& weight = parameter("weight");
  if (!masked_weight_.defined() || masked_weight_.dtype() != weight.value.dtype() ||
      masked_weight_.device() != weight.value.device()) {
    masked_weight_ = plexus::Tensor(weight.shape, weight.value.dtype(), weight.value.device());
    masked_weight_grad_ = plexus::Tensor(weight.shape, weight.value.dtype(), weight.value.device());
  }
  multiply_by_mask(ctx, weight.value, parameter("mask").value, masked_weight_);
  plexus::Parameter& dense_weight = dense_->parameter("weight");
  dense_weight.value = masked_weight_;  // Tensors share storage when copied
  dense_weight.grad = masked_weight_grad_;
  if (has_bias_) {
    dense_->parameter("bias").value = parameter("bias").value;
    dense_->parameter("bias").grad = parameter("bias").grad;  // the built-in layer accumulates into ours
  }
}

void PrunedConv::run_forward(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                             const plexus::MutableTensors& outputs) {
  bind_dense(ctx);
  dense_->forward(ctx, inputs, outputs);
}

void PrunedConv::run_backward(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                              const plexus::ConstTensors& outputs, const plexus::ConstTensors& output_grads,
                              const plexus::MutableTensors& input_grads) {
  bind_dense(ctx);
  plexus::fill(ctx, masked_weight_grad_, 0.0);
  dense_->backward(ctx, inputs, outputs, output_grads, input_grads);
  accumulate_masked(ctx, masked_weight_grad_, parameter("mask").value, parameter("weight").grad);
}

void PrunedConv::forward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                             const plexus::MutableTensors& outputs) {
  run_forward(ctx, inputs, outputs);
}

void PrunedConv::backward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                              const plexus::ConstTensors& outputs, const plexus::ConstTensors& output_grads,
                              const plexus::MutableTensors& input_grads) {
  run_backward(ctx, inputs, outputs, output_grads, input_grads);
}

void PrunedConv::forward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                              const plexus::MutableTensors& outputs) {
  run_forward(ctx, inputs, outputs);
}

void PrunedConv::backward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                               const plexus::ConstTensors& outputs, const plexus::ConstTensors& output_grads,
                               const plexus::MutableTensors& input_grads) {
  run_backward(ctx, inputs, outputs, output_grads, input_grads);
}

std::int64_t PrunedConv::prune_to(plexus::Context& ctx, double sparsity) {
  plexus::Parameter& weight = parameter("weight");
  plexus::Parameter& mask = parameter("mask");
  ctx.synchronize();  // the host reads the weights the last update wrote
  std::vector<double> mask_values = mask.value.to_values();
  const std::int64_t zeros = prune_by_magnitude(weight.value.to_values(), mask_values, sparsity);
  mask.value.copy_from(plexus::Tensor::from_values(mask_values, mask.shape, mask.value.dtype()));
  multiply_by_mask(ctx, weight.value, mask.value, weight.value);
  return zeros;
}

void PrunedConv::after_update(plexus::Context& ctx, std::int64_t updates_taken) {
  if (schedule_.prunes_at(updates_taken)) {
    prune_to(ctx, schedule_.sparsity_at(updates_taken));
    return;
  }
  multiply_by_mask(ctx, parameter("weight").value, parameter("mask").value, parameter("weight").value);
}

void register_pruned_layers(plexus::Registry& registry) {
  registry.add(
      "PrunedConv2d", [](plexus::LayerConfig& config) { return std::make_unique<PrunedConv>(config, "Conv2d"); },
      "Conv2d with a weight mask and gradual magnitude pruning (Zhu & Gupta 2017); the mask is a checkpointed buffer");
  registry.add(
      "PrunedConvTranspose2d",
      [](plexus::LayerConfig& config) { return std::make_unique<PrunedConv>(config, "ConvTranspose2d"); },
      "ConvTranspose2d with a weight mask and gradual magnitude pruning (Zhu & Gupta 2017)");
}

}  // namespace sparse_conv

// SparseConv2d / SparseConvTranspose2d (math in sparse_conv.h and sparse_filter.h).
#include "sparse_conv.h"

#include <nlohmann/json.hpp>

#include "builtin_layer.h"
#include "plexus/error.h"
#include "plexus/plugin.h"
#include "pruned_conv.h"

namespace sparse_conv {

namespace {

// y[n, c, ...] += b[c] on the CPU.
void add_bias_cpu(const plexus::Tensor& bias, plexus::Tensor& out) {
  const std::int64_t channels = out.dim(1), pixels = out.numel() / std::max<std::int64_t>(1, out.dim(0) * channels);
  plexus::dispatch_float(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* b = bias.data<T>();
    T* y = out.data<T>();
    for (std::int64_t e = 0; e < out.numel(); ++e) y[e] += b[(e / pixels) % channels];
  });
}

}  // namespace

SparseConv::SparseConv(plexus::LayerConfig& config, const std::string& dense_type)
    : transposed_(dense_type == "ConvTranspose2d") {
  nlohmann::json params = nlohmann::json::object();
  params["out_channels"] = config.integer("out_channels");
  kernel_ = config.integer("kernel");
  stride_ = config.integer("stride", 1);
  padding_ = config.integer("padding", 0);
  params["kernel"] = kernel_;
  params["stride"] = stride_;
  params["padding"] = padding_;
  if (transposed_) params["output_padding"] = config.integer("output_padding", 0);
  has_bias_ = config.boolean("bias", true);
  params["bias"] = has_bias_;
  const std::string format = config.text("format", "rows");
  if (format == "coo") format_ = SparseFormat::coo;
  else if (format != "rows") config.fail("format", "must be \"rows\" or \"coo\", got \"" + format + "\"");
  if (format_ == SparseFormat::rows && kernel_ > kMaxRowKernel)
    config.fail("kernel", "must be <= " + std::to_string(kMaxRowKernel) + " for format \"rows\" (4-bit ky, kx), got " +
                              std::to_string(kernel_) + "; use format \"coo\"");
  dense_ =
      make_builtin_layer(dense_type, config.node_name(), config.type(), params);  // checks the values like the built-in
}

std::vector<plexus::Shape> SparseConv::output_shapes(const std::vector<plexus::Shape>& inputs) const {
  std::vector<plexus::Shape> outputs = dense_->output_shapes(inputs);
  const std::int64_t channels = std::max(inputs[0][1], outputs[0][1]);
  if (format_ == SparseFormat::rows && channels > kMaxRowChannels)
    fail_shape("format \"rows\" codes channels in 8 bits: at most " + std::to_string(kMaxRowChannels) +
               " channels, got input " + plexus::shape_str(inputs[0]) + " and output " + plexus::shape_str(outputs[0]) +
               "; use format \"coo\"");
  return outputs;
}

void SparseConv::create_parameters(const std::vector<plexus::Shape>& inputs) {
  dense_->create_parameters(inputs);
  const plexus::Parameter& weight = dense_->parameter("weight");
  declare_buffer("weight", weight.shape, weight.initializer);
  if (has_bias_) declare_buffer("bias", dense_->parameter("bias").shape, dense_->parameter("bias").initializer);
}

const SparseFilter& SparseConv::filter() {
  if (!filter_) {
    const plexus::Parameter& weight = parameter("weight");
    filter_ =
        build_sparse_filter(weight.value.to_values(), weight.shape[0], weight.shape[1], kernel_, stride_, padding_);
  }
  return *filter_;
}

ConvGeometry SparseConv::geometry(const plexus::Shape& input, const plexus::Shape& output) const {
  const plexus::Shape& small = transposed_ ? input : output;
  const plexus::Shape& big = transposed_ ? output : input;
  ConvGeometry g;
  g.batch = input[0];
  g.small_channels = small[1];
  g.small_height = small[2];
  g.small_width = small[3];
  g.big_channels = big[1];
  g.big_height = big[2];
  g.big_width = big[3];
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  return g;
}

void SparseConv::forward_cpu(plexus::Context&, const plexus::ConstTensors& inputs,
                             const plexus::MutableTensors& outputs) {
  const plexus::Tensor& x = *inputs[0];
  plexus::Tensor& y = *outputs[0];
  const ConvGeometry g = geometry(x.shape(), y.shape());
  if (transposed_) to_big_cpu(filter(), format_, g, x, y);
  else to_small_cpu(filter(), format_, g, x, y);
  if (has_bias_) add_bias_cpu(parameter("bias").value, y);
}

void SparseConv::backward_cpu(plexus::Context&, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                              const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  const ConvGeometry g = geometry(inputs[0]->shape(), outputs[0]->shape());
  if (transposed_) to_small_cpu(filter(), format_, g, *output_grads[0], *input_grads[0]);
  else to_big_cpu(filter(), format_, g, *output_grads[0], *input_grads[0]);
}

#if PLEXUS_PLUGIN_WITH_CUDA
void SparseConv::forward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                              const plexus::MutableTensors& outputs) {
  const plexus::Tensor& x = *inputs[0];
  plexus::Tensor& y = *outputs[0];
  if (!device_filter_) device_filter_ = cuda::upload(filter(), x.dtype());
  const ConvGeometry g = geometry(x.shape(), y.shape());
  if (transposed_) cuda::to_big(ctx, *device_filter_, format_, g, x, y);
  else cuda::to_small(ctx, *device_filter_, format_, g, x, y);
  if (has_bias_) cuda::add_bias(ctx, parameter("bias").value, y);
}

void SparseConv::backward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                               const plexus::ConstTensors& outputs, const plexus::ConstTensors& output_grads,
                               const plexus::MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  if (!device_filter_) device_filter_ = cuda::upload(filter(), inputs[0]->dtype());
  const ConvGeometry g = geometry(inputs[0]->shape(), outputs[0]->shape());
  if (transposed_) cuda::to_small(ctx, *device_filter_, format_, g, *output_grads[0], *input_grads[0]);
  else cuda::to_big(ctx, *device_filter_, format_, g, *output_grads[0], *input_grads[0]);
}
#endif

void register_sparse_layers(plexus::Registry& registry) {
  registry.add(
      "SparseConv2d", [](plexus::LayerConfig& config) { return std::make_unique<SparseConv>(config, "Conv2d"); },
      "Conv2d over the non-zero weights only (COO or a row layout), from a pruned checkpoint; input gradient only");
  registry.add(
      "SparseConvTranspose2d",
      [](plexus::LayerConfig& config) { return std::make_unique<SparseConv>(config, "ConvTranspose2d"); },
      "ConvTranspose2d over the non-zero weights only (COO or a row layout); input gradient only");
}

}  // namespace sparse_conv

// The two entry points Plexus looks up in a plugin (plexus/plugin.h): the
// pruned layers (pruned_conv.cpp) and the sparse ones above.
extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  sparse_conv::register_pruned_layers(*registry);
  sparse_conv::register_sparse_layers(*registry);
}

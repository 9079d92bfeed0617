// A test-only plugin layer for plexus-ae's divergence handling:
// "PoisonAfter" passes its input through unchanged for its first
// `clean_calls` training-mode forward passes, then outputs NaN everywhere,
// as a model whose weights blew up would. Backward passes gradients through.
#include <cmath>
#include <limits>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/plugin.h"
#include "plexus/registry.h"

namespace {

class PoisonAfter : public plexus::Layer {
 public:
  explicit PoisonAfter(plexus::LayerConfig& config) : clean_calls_(config.integer("clean_calls")) {
    if (clean_calls_ < 0) config.fail("clean_calls", "must be >= 0, got " + std::to_string(clean_calls_));
  }
  std::vector<plexus::Shape> output_shapes(const std::vector<plexus::Shape>& inputs) const override {
    if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
    return {inputs[0]};
  }

 protected:
  void forward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                   const plexus::MutableTensors& outputs) override {
    const bool poison = ctx.training() && ++training_calls_ > clean_calls_;
    plexus::dispatch_float(inputs[0]->dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* x = inputs[0]->data<T>();
      T* y = outputs[0]->data<T>();
      for (std::int64_t i = 0; i < inputs[0]->numel(); ++i) y[i] = poison ? std::numeric_limits<T>::quiet_NaN() : x[i];
    });
  }
  void backward_cpu(plexus::Context&, const plexus::ConstTensors&, const plexus::ConstTensors&,
                    const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override {
    if (input_grads[0]) input_grads[0]->copy_from(*output_grads[0]);
  }

 private:
  std::int64_t clean_calls_;
  std::int64_t training_calls_ = 0;
};

}  // namespace

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add(
      "PoisonAfter", [](plexus::LayerConfig& config) { return std::make_unique<PoisonAfter>(config); },
      "test only: identity, then NaN after `clean_calls` training forwards");
}

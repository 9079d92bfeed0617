// A well-formed test plugin: registers "PluginScale", y = factor * x.
#include <memory>
#include <sstream>

#include "plexus/plugin.h"

namespace plexus_test_plugins {

class PluginScale : public plexus::Layer {
 public:
  explicit PluginScale(plexus::LayerConfig& config) : factor_(config.number("factor", 2.0)) {
    if (!(factor_ > 0.0)) {
      std::ostringstream value;
      value << factor_;
      config.fail("factor", "must be > 0, got " + value.str());
    }
  }
  std::vector<plexus::Shape> output_shapes(const std::vector<plexus::Shape>& inputs) const override {
    if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
    return {inputs[0]};
  }

 protected:
  void forward_cpu(plexus::Context&, const plexus::ConstTensors& inputs,
                   const plexus::MutableTensors& outputs) override {
    plexus::dispatch_float(inputs[0]->dtype(), [&](auto zero) {
      using T = decltype(zero);
      for (std::int64_t e = 0; e < inputs[0]->numel(); ++e)
        outputs[0]->data<T>()[e] = T(factor_) * inputs[0]->data<T>()[e];
    });
  }
  void backward_cpu(plexus::Context&, const plexus::ConstTensors&, const plexus::ConstTensors&,
                    const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override {
    if (!input_grads[0]) return;
    plexus::dispatch_float(output_grads[0]->dtype(), [&](auto zero) {
      using T = decltype(zero);
      for (std::int64_t e = 0; e < output_grads[0]->numel(); ++e)
        input_grads[0]->data<T>()[e] = T(factor_) * output_grads[0]->data<T>()[e];
    });
  }

 private:
  double factor_;
};

}  // namespace plexus_test_plugins

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add(
      "PluginScale",
      [](plexus::LayerConfig& config) { return std::make_unique<plexus_test_plugins::PluginScale>(config); },
      "y = factor * x (a test plugin)");
}

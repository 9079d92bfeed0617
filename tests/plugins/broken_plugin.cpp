// The loader's test plugins, one shared library each, built from this file
// with BROKEN_PLUGIN set to one of (tests/plugins/CMakeLists.txt):
//   0 good            well formed: registers "PluginScale", y = factor * x;
//   1 no_entry        not a Plexus plugin: it exports neither entry point;
//   2 no_register     half a plugin: the ABI query is there, the register function is missing;
//   3 abi_mismatch    built for another plugin ABI: the loader must refuse it before calling
//                     plexus_plugin_register (which would register "AbiMismatchLayer");
//   4 duplicate_relu  registers a type the built-ins already have ("ReLU");
//   5 empty           well formed, but its register function adds no layer type (a forgotten
//                     registry->add): the loader warns about it;
//   6 abi_7           built against plugin ABI 7, whose Layer had the hint methods that
//                     traits() replaced: the loader must say what to change.
#include <memory>
#include <sstream>

#include "plexus/plugin.h"

#if BROKEN_PLUGIN == 0
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

extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add(
      "PluginScale",
      [](plexus::LayerConfig& config) { return std::make_unique<plexus_test_plugins::PluginScale>(config); },
      "y = factor * x (a test plugin)");
}

extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }
#elif BROKEN_PLUGIN == 1
extern "C" int plexus_test_unrelated_function() { return 42; }
#elif BROKEN_PLUGIN == 3
extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion + 1; }
#elif BROKEN_PLUGIN == 6
extern "C" int plexus_plugin_abi_version() { return 7; }
#else
extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }
#endif

#if BROKEN_PLUGIN == 3 || BROKEN_PLUGIN == 4 || BROKEN_PLUGIN == 6
extern "C" void plexus_plugin_register(plexus::Registry* registry) {
  registry->add(BROKEN_PLUGIN == 4 ? "ReLU" : "AbiMismatchLayer",
                [](plexus::LayerConfig&) -> std::unique_ptr<plexus::Layer> { return nullptr; });
}
#elif BROKEN_PLUGIN == 5
extern "C" void plexus_plugin_register(plexus::Registry*) {}
#endif

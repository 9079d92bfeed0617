#pragma once
// Layer: the plugin interface. Every built-in layer and every third-party
// layer implements it and is registered by name (plexus/registry.h).
//
// Life of a layer inside a Net:
//   1. constructed by its factory from a LayerConfig (reads and validates params);
//   2. output_shapes(input shapes): validates inputs, returns output shapes;
//   3. create_parameters(input shapes): declares parameters, once;
//   4. traits(device): what it runs and the optimisations it allows (LayerTraits);
//   5. forward / backward, dispatched to the CPU or CUDA implementation.
// A new layer overrides output_shapes, create_parameters (if it has
// parameters), traits, and its four kernels; nothing else.
// Contract: backward OVERWRITES each non-null input gradient and ACCUMULATES
// (+=) into parameter gradients. An input gradient pointer is null when no
// gradient is wanted for that input.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/context.h"
#include "plexus/parameter.h"
#include "plexus/tensor.h"

namespace plexus {

using ConstTensors = std::vector<const Tensor*>;
using MutableTensors = std::vector<Tensor*>;

// An activation y = x for x > 0, negative_slope * x otherwise (ReLU:
// negative_slope 0, which gives +0 for x <= 0), with negative_slope >= 0,
// so that y > 0 exactly where x > 0. A Net may have a layer apply it to its
// output as it writes it (Net::set_activation_fusion). Inactive: no activation.
struct FusedActivation {
  bool active = false;
  double negative_slope = 0.0;
};

// What backward does about one input's gradient.
enum class InputGradient {
  kComputed,    // backward writes dL/dx_i (the default)
  kNone,        // x_i carries no gradient (integer labels, a shape reference, a rate the caller picks):
                // backward is given a null pointer for it
  kOutputGrad,  // dL/dx_i is dL/dy_0 itself, element for element, when x_i has y_0's shape (Add). A Net
                // may then give x_i's gradient the storage of y_0's (Net::backward), so backward must leave
                // an input gradient that shares the output gradient's storage as it is
};

// What a layer tells the Net about itself on one device (Layer::traits):
// what it can run, and the optimisations it allows. The default of every
// field is the safe answer, so a layer sets only what it has.
struct LayerTraits {
  // Whether a CUDA implementation exists; a layer that has none fails with
  // "layer 'x' (T) has no CUDA kernel" when asked to run on a GPU.
  bool has_cuda = false;

  // Whether the CUDA forward and backward may be recorded once into a CUDA
  // graph and replayed (plexus/step_graph.h). True only when, once a first
  // step at the current shapes has run, both only enqueue work on the
  // context's stream: no host synchronisation, no value read back to the
  // host, no decision taken on the host from device data, and random draws
  // only through cuda::device_random (plexus/cuda/cuda_context.h), whose
  // seed lives in device memory. Allocating and freeing Tensors is fine. A
  // net holding a layer without it is launched eagerly.
  bool cuda_graph_capturable = false;

  // Whether forward may be given one tensor as both input 0 and output 0
  // (same shape), which a Net that runs forward only does when nothing else
  // reads that input afterwards (Net::set_inference_only). True only when
  // every element of output 0 is written after the last read of the input
  // elements it depends on, and those are its own pixel's (an element-wise
  // or per-pixel layer whose kernel reads a pixel before it writes it).
  bool forward_in_place = false;

  // Whether the kernels take bf16 tensors (DType::bf16, a storage type) for
  // their inputs and outputs and their gradients, each tensor in its own
  // dtype (f32 or bf16), computing in f32, and gain by it. A Net whose
  // activation storage is bf16 (Net::set_activation_storage) stores a blob
  // in bf16 only when its producer and its one reader both say so.
  bool stores_bf16 = false;
  // Whether the kernels take bf16 tensors at all, as above, even where that
  // costs more than f32 would (the Net then keeps f32); stores_bf16 implies
  // it. Layer::forward and backward refuse a bf16 tensor, naming it, when
  // the layer takes none (takes_bf16()) or its parameters are not f32.
  bool accepts_bf16 = false;
  bool takes_bf16() const { return stores_bf16 || accepts_bf16; }

  // Output activation fusion (Net::set_activation_fusion), two sides.
  // fused_activation: this layer is such an activation (one input, one
  // output of its shape), and its backward on either device computes the
  // same input gradient when given its output in place of its input (its
  // derivative depends only on the sign; ReLU, LeakyReLU with a slope >= 0).
  FusedActivation fused_activation;
  // applies_output_activation: forward applies the activation it is given
  // (ForwardOptions::output_activation) to output 0 as it writes it, and
  // backward never reads output 0 (so the Net may store the activation's
  // output there; the activation's own backward then makes the gradient of
  // the value before it). The layer's backward stays that of the plain layer.
  bool applies_output_activation = false;

  // Per input, by index, what backward does about its gradient; inputs past
  // the end of `input_gradients` get `other_inputs_gradient`.
  std::vector<InputGradient> input_gradients;
  InputGradient other_inputs_gradient = InputGradient::kComputed;
  InputGradient input_gradient(int input_index) const {
    return input_index >= 0 && static_cast<std::size_t>(input_index) < input_gradients.size()
               ? input_gradients[static_cast<std::size_t>(input_index)]
               : other_inputs_gradient;
  }
  // False for inputs that carry no gradient (InputGradient::kNone).
  bool input_is_differentiable(int input_index) const { return input_gradient(input_index) != InputGradient::kNone; }
};

// What a caller tells one forward call besides its tensors (a Net fills it
// per node and per call; a plain call takes the defaults).
struct ForwardOptions {
  // Whether nothing reads input 0 after this forward (a Net that runs
  // forward only: Net::set_inference_only). A CPU forward may then give the
  // memory of the parts of input 0 it has finished reading back to the
  // system as it goes (host_memory::discard), which leaves their values
  // undefined. A layer may ignore it.
  bool discard_input = false;
  // The activation to apply to output 0 as it is written; given only to a
  // layer whose traits say applies_output_activation (inactive otherwise).
  FusedActivation output_activation;
};

class Layer {
 public:
  virtual ~Layer() = default;

  const std::string& type() const { return type_; }
  const std::string& name() const { return name_; }
  void set_identity(std::string type, std::string name) {
    type_ = std::move(type);
    name_ = std::move(name);
  }

  // Validates the input shapes and returns the output shapes. Throws
  // ShapeError naming the node, the input and both shapes.
  virtual std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const = 0;
  // Declares parameters with declare_parameter(); called once, after
  // output_shapes accepted `inputs`. Default: no parameters.
  virtual void create_parameters(const std::vector<Shape>& inputs);
  // What this layer runs and allows on `device` (LayerTraits). Facts that
  // do not depend on the device (has_cuda) are the same for every device.
  // Default: LayerTraits{}, a CPU-only layer that allows no optimisation.
  virtual LayerTraits traits(Device device) const;

  // Runs the CPU or CUDA kernel for ctx's device; the kernel reads `options`
  // through forward_options() while it runs.
  void forward(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs,
               const ForwardOptions& options = {});
  void backward(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs, const ConstTensors& output_grads,
                const MutableTensors& input_grads);

  std::vector<Parameter*> parameters();
  Parameter& parameter(const std::string& name);
  // Allocates every parameter (value and zero grad) and fills it with its
  // initializer drawn from `rng`.
  void initialize_parameters(DType dtype, Device device, std::mt19937_64& rng);
  // Allocates every parameter as zeros, without a gradient, for weights
  // copied in next (InitialParameters::for_loading, plexus/net.h).
  void allocate_parameters(DType dtype, Device device);

  // Called by the trainer after every optimiser update, with the number of
  // updates taken so far (1 after the first; a resumed run continues the
  // count), outside any recorded CUDA graph, so it may synchronise and
  // decide on the host. For layers that keep a constraint on their
  // parameters (a pruning mask re-applied after Adam, a schedule that acts
  // at given steps). Default: nothing.
  virtual void after_update(Context& ctx, std::int64_t updates_taken);

 protected:
  Parameter& declare_parameter(const std::string& name, Shape shape, Initializer initializer);
  // A Parameter with trainable = false: saved in and loaded from checkpoints
  // under "<node>.<name>" like a parameter, never changed by an optimiser,
  // not gradient-checked; the layer changes it itself (after_update).
  Parameter& declare_buffer(const std::string& name, Shape shape, Initializer initializer);
  // Throws ShapeError "node 'x' (T): <message>".
  [[noreturn]] void fail_shape(const std::string& message) const;
  // "node 'x' (T)" for messages.
  std::string who() const;
  // The options of the forward call running now (Layer::forward); defaults
  // outside a forward.
  const ForwardOptions& forward_options() const { return forward_options_; }

  virtual void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) = 0;
  virtual void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                            const ConstTensors& output_grads, const MutableTensors& input_grads) = 0;
  virtual void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs);
  virtual void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                             const ConstTensors& output_grads, const MutableTensors& input_grads);

 private:
  void check_device(const Context& ctx, const ConstTensors& tensors, const char* role) const;
  // ConfigError naming the tensor when one is bf16 and the layer does not
  // accept bf16 on ctx's device, or its parameters are not f32.
  template <class Tensors>
  void check_storage(const Context& ctx, const Tensors& tensors, const char* role) const;
  std::string type_;
  std::string name_;
  std::vector<std::unique_ptr<Parameter>> parameters_;
  ForwardOptions forward_options_;
};

// Runs `fn` with a value of the C++ type matching `dtype`:
//   dispatch_float(t.dtype(), [&](auto zero) { using T = decltype(zero); ... });
// ConfigError for bf16, a storage type that no kernel computes in.
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) throw ConfigError("bf16 tensors store values; this computation takes f32 or f64 tensors");
  if (dtype == DType::f64) return fn(double{0});
  return fn(float{0});
}

}  // namespace plexus

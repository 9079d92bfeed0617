#pragma once
// Layer: the plugin interface. Every built-in layer and every third-party
// layer implements it and is registered by name (plexus/registry.h).
//
// Life of a layer inside a Net:
//   1. constructed by its factory from a LayerConfig (reads and validates params);
//   2. output_shapes(input shapes): validates inputs, returns output shapes;
//   3. create_parameters(input shapes): declares parameters, once;
//   4. forward / backward, dispatched to the CPU or CUDA implementation.
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
  // False for inputs that carry no gradient (integer labels, shape references).
  virtual bool input_is_differentiable(int input_index) const;
  // True when dL/dx_i is dL/dy_0 itself, element for element (x_i of y_0's
  // shape; Add). A Net may then give x_i's gradient the storage of y_0's
  // (Net::backward), so backward must leave an input gradient that shares
  // the output gradient's storage as it is. Default: false.
  virtual bool input_grad_is_output_grad(int input_index) const;

  // Output activation fusion (Net::set_activation_fusion), two sides:
  // as_fused_activation: this layer is such an activation (one input, one
  // output of its shape), and its backward on either device computes the
  // same input gradient when given its output in place of its input (its
  // derivative depends only on the sign; ReLU, LeakyReLU with a slope >= 0).
  // Default: inactive, not one.
  virtual FusedActivation as_fused_activation() const;
  // fuses_output_activation: forward on `device` applies the activation
  // last given to set_output_activation to output 0 as it writes it, and
  // backward never reads output 0 (so the Net may store the activation's
  // output there; the activation's own backward then makes the gradient
  // of the value before it). Default: false, and set_output_activation is
  // never called. The layer's backward stays that of the plain layer.
  virtual bool fuses_output_activation(Device device) const;
  virtual void set_output_activation(const FusedActivation& activation);

  void forward(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs);
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

  // Whether a CUDA implementation exists; a layer that has none fails with
  // "layer 'x' (T) has no CUDA kernel" when asked to run on a GPU.
  virtual bool has_cuda() const { return false; }

  // Whether this layer's CUDA forward and backward may be recorded once into
  // a CUDA graph and replayed (plexus/step_graph.h). True only when, once a
  // first step at the current shapes has run, both only enqueue work on the
  // context's stream: no host synchronisation, no value read back to the
  // host, no decision taken on the host from device data, and random draws
  // only through cuda::device_random (plexus/cuda/cuda_context.h), whose seed
  // lives in device memory. Allocating and freeing Tensors is fine. The
  // default, false, is always safe: a net holding such a layer is launched
  // eagerly.
  virtual bool cuda_graph_capturable() const { return false; }

  // Whether forward on `device` may be given one tensor as both input 0 and
  // output 0 (same shape), which a Net that runs forward only does when
  // nothing else reads that input afterwards (Net::set_inference_only). True
  // only when every element of output 0 is written after the last read of
  // the input elements it depends on, and those are its own pixel's (an
  // element-wise or per-pixel layer whose kernel reads a pixel before it
  // writes it). The default, false, is always safe.
  virtual bool forward_in_place(Device device) const {
    (void)device;
    return false;
  }

  // Whether this layer's kernels on `device` take bf16 tensors (DType::bf16,
  // a storage type) for its inputs and outputs and their gradients, each
  // tensor in its own dtype (f32 or bf16), computing in f32, and gain by it.
  // A Net whose activation storage is bf16 (Net::set_activation_storage)
  // stores a blob in bf16 only when its producer and its one reader both say
  // so. The default, false: every tensor the layer sees has the net's dtype.
  virtual bool stores_bf16(Device device) const {
    (void)device;
    return false;
  }
  // Whether the kernels on `device` take bf16 tensors at all, as above, even
  // where that costs more than f32 would (the Net then keeps f32):
  // stores_bf16 unless a layer says otherwise. Layer::forward and backward
  // refuse a bf16 tensor, naming it, when this is false or the layer's
  // parameters are not f32.
  virtual bool accepts_bf16(Device device) const { return stores_bf16(device); }

  // Told by a Net that runs forward only (Net::set_inference_only) before
  // each forward: whether nothing reads input 0 after it. A CPU forward may
  // then give the memory of the parts of input 0 it has finished reading
  // back to the system as it goes (host_memory::discard), which leaves their
  // values undefined. Default: ignored.
  virtual void set_discard_input(bool discard) { (void)discard; }

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

#pragma once
// Net: a graph of layers built from a ModelSpec. Shapes are inferred at
// build time (errors name the node and the shapes), activations are
// allocated once per layout and their gradients at the first backward (so a
// net that only runs forward holds no gradients), forward runs in
// topological order and backward in reverse.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "plexus/layer.h"
#include "plexus/model_spec.h"
#include "plexus/net_plans.h"
#include "plexus/registry.h"

namespace plexus {

struct NamedParameter {
  std::string name;  // "<node>.<parameter>", e.g. "g_a0.weight"
  Parameter* parameter;
};

// Told around every node's forward and backward (profilers: NVTX ranges,
// per-layer CUDA events). Calls come from the thread running the Net.
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void before(const std::string& node, const std::string& type, bool backward) = 0;
  virtual void after(const std::string& node, const std::string& type, bool backward) = 0;
};

// What a new Net's parameters start as. drawn: values from their initializers,
// seeded, with zero gradients. for_loading: zeros and no gradients, for a net
// whose weights are copied in next and that only runs forward (a codec's
// transforms): drawing millions of values only to overwrite them takes
// seconds, and the gradients would double the memory. backward() on such a
// net throws. shapes_only: no memory for parameters or blobs at all, for a net
// built only for its blobs' shapes (blob_shape(); parameters() give shapes and
// undefined values): a model's weights can be a gigabyte. forward(), backward()
// and blob() on such a net throw.
enum class InitialParameters { drawn, for_loading, shapes_only };

class Net {
 public:
  // `input_shapes` gives the shape of every spec input. Parameters are
  // initialised from `seed`, so equal seeds give equal nets.
  Net(const ModelSpec& spec, const Registry& registry, const std::map<std::string, Shape>& input_shapes,
      DType dtype = DType::f32, Device device = Device::cpu(), std::uint64_t seed = 0,
      InitialParameters initial = InitialParameters::drawn);
  ~Net();

  // New input shapes (e.g. another image size); parameters are kept.
  void reshape(const std::map<std::string, Shape>& input_shapes);

  // For a net that only ever runs forward (compress, decompress): from now on
  // it holds only the blobs in `kept` between passes. forward() allocates
  // each blob just before the node that writes it and frees it after the
  // last node that reads it unless it is kept, lets a node whose layer allows
  // it (LayerTraits::forward_in_place) write its output over an input read by
  // nobody later, tells a node that is the last reader of its input so
  // (ForwardOptions::discard_input: a convolution gives the input's memory back
  // as it goes), and frees the model inputs too, so that a pass holds little
  // more than the blobs alive at one node. Each forward() needs its inputs filled
  // again through input(); blob() of a blob not kept (or not yet computed at
  // this layout) throws, and so does backward(); blob_shape() answers for
  // every blob. The values computed are exactly those of a net that keeps
  // everything. Throws ConfigError for a name that is no blob.
  void set_inference_only(const std::vector<std::string>& kept);
  bool inference_only() const { return inference_only_; }
  // How blobs are stored. DType::f32 (the default): every blob and its
  // gradient in the net's dtype. DType::bf16 (an f32 net only, else
  // ConfigError): a blob that is no model input, whose producer and whose
  // one reader both store bf16 (LayerTraits::stores_bf16 on the net's device), is
  // stored in bf16, its gradient too; every other blob stays f32 (a blob fused
  // away by set_activation_fusion takes its activation output's dtype).
  // Parameters and their gradients stay f32. Reallocates the blobs, as reshape() does.
  void set_activation_storage(DType storage);
  DType activation_storage() const { return activation_storage_; }
  // Activation fusion, off by default (the trainer turns it on). On: a
  // ReLU or LeakyReLU node (LayerTraits::fused_activation) whose one input is
  // output 0 of a node that applies activations (LayerTraits::applies_output_activation:
  // the convolutions, Add), read by that node alone, is applied by the producer
  // as it writes. The activation's output takes over the producer's output
  // storage (and its dtype), the activation's forward is skipped, and its
  // backward runs as before, given its output as its input. One pass over
  // the blob and one blob fewer per pair; the values are those of the
  // unfused net, bit for bit, except under bf16 storage: a LeakyReLU's
  // value is rounded once instead of twice, and a producer's output whose
  // activation's output is f32 is no longer rounded to bf16 first. blob()
  // of the producer's output then throws (its storage holds the activated
  // values); its gradient stays. An inference-only net never fuses
  // (set_inference_only turns it off). Reallocates the blobs, as reshape() does.
  void set_activation_fusion(bool on);
  // How many activation nodes are applied by their producer at this layout.
  std::size_t fused_activation_count() const { return storage_plan_.fused_blobs().size(); }
  // The dtype blob `name` is stored in (its gradient's too).
  DType blob_dtype(const std::string& name) const;
  // How many blobs the net has, and how many of them are stored in bf16.
  std::size_t blob_count() const { return shapes_.size(); }
  std::size_t bf16_blob_count() const { return storage_plan_.bf16_blob_count(); }
  // Changes whenever blobs are reallocated (construction, reshape): a CUDA
  // graph recorded at one layout must not be replayed at another.
  std::uint64_t layout_version() const { return layout_version_; }
  // True when every layer is cuda_graph_capturable (LayerTraits); otherwise false, with
  // "node 'x' (T)" of the first one that is not in *culprit.
  bool cuda_graph_capturable(std::string* culprit) const;

  Tensor& input(const std::string& name);
  bool has_input(const std::string& name) const;           // whether the spec lists it among its inputs
  const Tensor& blob(const std::string& name) const;       // any input or node output
  const Shape& blob_shape(const std::string& name) const;  // also of a blob an inference-only net does not hold
  const Tensor& blob_grad(const std::string& name) const;  // after backward()
  bool has_blob(const std::string& name) const;
  // A scalar blob's value copied to the host.
  double scalar(const std::string& name) const;

  void forward(Context& ctx);
  // Backpropagates sum_k weight_k * blob_k over the given scalar blobs.
  // Parameter gradients are accumulated: call zero_grad() first. On CUDA a
  // layer's branch (cuda::Branch) may run beside the next nodes' backward
  // (Context::DeferredJoins); all of it is joined on the context's stream
  // when backward returns, and a node's before the hook and the observer's
  // after() below see that node.
  void backward(Context& ctx, const std::map<std::string, double>& loss_weights);
  void zero_grad();

  // nullptr (the default): no observer. The observer must outlive its use.
  void set_observer(NodeObserver* observer) { observer_ = observer; }

  // Called by backward() once per node, in reverse execution order, right
  // after the node's backward (also for a node that backward skips because
  // no loss depends on it): from then on in this pass the node's parameter
  // gradients are final once the context's stream branches are joined. A
  // layer may still be computing them on a branch (cuda::Branch), so a hook
  // that reads them, or hands them to other work, first calls
  // ctx.join_branches(); one that only notes the node leaves the branches
  // running. Data-parallel training starts reducing them there
  // (plexus/distributed/gradient_buckets.h). An empty function: no hook.
  using GradientsReadyHook = std::function<void(Context& ctx, const std::string& node)>;
  void set_gradients_ready_hook(GradientsReadyHook hook) { gradients_ready_ = std::move(hook); }

  // Every parameter and buffer, by name (what a checkpoint holds).
  std::vector<NamedParameter> parameters();
  // The parameters an optimiser updates: parameters() without the buffers.
  std::vector<NamedParameter> trainable_parameters();
  // Tells every layer that an optimiser update was applied (Layer::after_update).
  void after_update(Context& ctx, std::int64_t updates_taken);
  // Elements of the trainable parameters (buffers not counted).
  std::int64_t parameter_count() const;
  const ModelSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Every layer type the net uses -> where the registry got it ("built-in"
  // or "plugin <path>", LayerTypeInfo::origin).
  const std::map<std::string, std::string>& layer_type_origins() const { return layer_type_origins_; }
  // Node names in execution order.
  std::vector<std::string> execution_order() const;
  Layer& layer(const std::string& node_name);

 private:
  struct Node;
  void build_order();
  void infer_shapes(const std::map<std::string, Shape>& input_shapes, bool first_time);
  // The message for a node whose output_shapes or create_parameters threw
  // `what`: the node, its inputs' shapes and producers, the net's input shapes.
  std::string shape_failure(const Node& node, const std::string& what, const std::map<std::string, Shape>& shapes,
                            const std::map<std::string, Shape>& input_shapes, bool first_time) const;
  void warn_about_unread_outputs() const;
  // Inference-only nets: the allocation of node `index`'s outputs before it
  // runs, and whether it is the last reader of its input 0 (MemoryPlan).
  void allocate_outputs(std::size_t index);
  bool input_expires(std::size_t index) const;
  // Every blob's gradient, and a scratch gradient for each input of a node
  // that other nodes also read; a blob the memory plan has share another's
  // gradient (MemoryPlan::shared_gradients) gets that gradient's storage:
  // no copy is made, and no memory held, for it.
  void allocate_grads();
  // Asks the layers' traits, plans the blobs' storage and memory, and
  // allocates the blobs at the current shapes (none for an inference-only
  // net); gradients wait for backward().
  void allocate_blobs();
  void plan_memory();
  ModelSpec spec_;
  DType dtype_;
  Device device_;
  std::vector<std::unique_ptr<Node>> nodes_;  // in execution order
  std::map<std::string, Tensor> blobs_;       // an inference-only net: undefined while not held
  std::map<std::string, Shape> shapes_;       // every blob's shape at the current layout
  std::map<std::string, Tensor> grads_;
  BlobGraph graph_;                  // who writes and who reads each blob
  std::vector<LayerTraits> traits_;  // each node's, in execution order, on device_, at this layout
  bool inference_only_ = false;
  bool has_gradients_ = true;  // false for InitialParameters::for_loading
  bool shapes_only_ = false;   // InitialParameters::shapes_only: nothing allocated
  DType activation_storage_ = DType::f32;
  bool activation_fusion_ = false;
  StoragePlan storage_plan_;
  MemoryPlan memory_plan_;
  std::set<std::string> kept_;  // what an inference-only net holds between passes
  std::map<std::string, std::string> layer_type_origins_;
  std::uint64_t layout_version_ = 0;
  NodeObserver* observer_ = nullptr;
  GradientsReadyHook gradients_ready_;
};

// Whether training nets fuse activations (Net::set_activation_fusion): yes,
// unless settings.fuse_activations is off (PLEXUS_FUSE_ACTIVATIONS=0, to
// compare). Pass the training Context's kernel_settings().
bool activation_fusion_for_training(const KernelSettings& settings = KernelSettings{});

// The activation storage a training precision implies: bf16 under
// Precision::bf16 on CUDA (unless settings.bf16_storage is off:
// PLEXUS_BF16_STORAGE=0, to compare), else f32. For Net::set_activation_storage;
// pass the training Context's kernel_settings().
DType activation_storage_for(Precision precision, Device device, const KernelSettings& settings = KernelSettings{});

}  // namespace plexus

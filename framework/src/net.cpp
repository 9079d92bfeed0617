#include "plexus/net.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "plexus/error.h"
#include "plexus/tensor_ops.h"

namespace plexus {

struct Net::Node {
  NodeSpec spec;
  std::unique_ptr<Layer> layer;
  // Gradient buffers for inputs that other nodes also read: this node's
  // contribution is written here, then added into the blob's gradient.
  std::vector<Tensor> scratch_grads;
};

namespace {

// The nodes of one cycle among `pending` (every one of them waits on an
// input no sorted node produced), in data-flow order from the one listed
// first in the spec: "'a' -> 'b' -> 'a' (through blobs 'a_out', 'b_out')".
template <typename NodePtr>
std::string describe_cycle(const std::vector<NodePtr>& pending, const std::set<std::string>& available,
                           const std::map<std::string, std::string>& producer) {
  std::map<std::string, std::size_t> index;  // node name -> position in `pending` (spec order)
  for (std::size_t i = 0; i < pending.size(); ++i) index[pending[i]->spec.name] = i;
  // Walk "waits on" edges: each node to the producer of its first missing
  // input. That producer is pending too, so the walk must revisit a node.
  std::vector<std::size_t> walk;       // node positions, in the order visited
  std::vector<std::string> blob_into;  // blob_into[k]: the blob walk[k] waits on
  std::map<std::size_t, std::size_t> step_of;
  std::size_t current = 0;
  while (!step_of.count(current)) {
    step_of[current] = walk.size();
    walk.push_back(current);
    const auto& inputs = pending[current]->spec.inputs;
    const std::string& missing =
        *std::find_if(inputs.begin(), inputs.end(), [&](const std::string& input) { return !available.count(input); });
    blob_into.push_back(missing);
    current = index.at(producer.at(missing));
  }
  // walk[step_of[current]..] is the cycle against the data flow; reverse it.
  std::vector<std::size_t> cycle(walk.begin() + static_cast<std::ptrdiff_t>(step_of[current]), walk.end());
  std::vector<std::string> blobs(blob_into.begin() + static_cast<std::ptrdiff_t>(step_of[current]), blob_into.end());
  std::reverse(cycle.begin(), cycle.end());
  std::reverse(blobs.begin(), blobs.end());
  // Now cycle[k] produces blobs[k + 1], read by cycle[k + 1]; start at the
  // node earliest in the spec.
  const std::size_t start = static_cast<std::size_t>(std::min_element(cycle.begin(), cycle.end()) - cycle.begin());
  std::rotate(cycle.begin(), cycle.begin() + static_cast<std::ptrdiff_t>(start), cycle.end());
  std::rotate(blobs.begin(), blobs.begin() + static_cast<std::ptrdiff_t>((start + 1) % blobs.size()), blobs.end());
  std::string nodes_text, blobs_text;
  for (std::size_t k = 0; k < cycle.size(); ++k) {
    nodes_text += "'" + pending[cycle[k]]->spec.name + "' -> ";
    blobs_text += (k ? ", '" : "'") + blobs[k] + "'";
  }
  nodes_text += "'" + pending[cycle[0]]->spec.name + "'";
  return nodes_text + " (through blobs " + blobs_text + ")";
}

// "image [1, 3, 64, 64], target [1, 3, 64, 64]", in the spec's input order.
std::string input_shapes_text(const ModelSpec& spec, const std::map<std::string, Shape>& input_shapes) {
  std::string text;
  for (const auto& input : spec.inputs)
    text += (text.empty() ? "" : ", ") + input + " " + shape_str(input_shapes.at(input));
  return text;
}

}  // namespace

Net::Net(const ModelSpec& spec, const Registry& registry, const std::map<std::string, Shape>& input_shapes, DType dtype,
         Device device, std::uint64_t seed, InitialParameters initial)
    : spec_(spec),
      dtype_(dtype),
      device_(device),
      inference_only_(initial == InitialParameters::shapes_only),  // so that no blob is allocated
      has_gradients_(initial == InitialParameters::drawn),
      shapes_only_(initial == InitialParameters::shapes_only) {
  if (dtype != DType::f32 && dtype != DType::f64)
    throw ConfigError(spec_.source + ": model '" + spec_.name + "': a net computes in f32 or f64, not " +
                      dtype_name(dtype));
  for (const auto& node_spec : spec_.nodes) {
    auto node = std::make_unique<Node>();
    node->spec = node_spec;
    node->layer = registry.create(node_spec.type, node_spec.name, node_spec.params);
    layer_type_origins_[node_spec.type] = registry.info(node_spec.type).origin;
    nodes_.push_back(std::move(node));
  }
  build_order();
  warn_about_unread_outputs();
  infer_shapes(input_shapes, /*first_time=*/true);
  if (shapes_only_) return;
  if (initial == InitialParameters::for_loading) {
    for (auto& node : nodes_) node->layer->allocate_parameters(dtype_, device_);
    return;
  }
  // Parameters are drawn in spec order from one generator: equal seeds, equal nets.
  std::mt19937_64 rng(seed);
  std::map<std::string, Node*> by_name;
  for (auto& node : nodes_) by_name[node->spec.name] = node.get();
  for (const auto& node_spec : spec_.nodes) by_name[node_spec.name]->layer->initialize_parameters(dtype_, device_, rng);
}

Net::~Net() = default;

void Net::build_order() {
  const std::string& source = spec_.source;
  std::map<std::string, std::string> producer;  // blob -> node (or "" for a model input)
  std::set<std::string> node_names;
  for (const auto& input : spec_.inputs) {
    if (producer.count(input)) throw ConfigError(source + ": model input '" + input + "' is listed twice");
    producer[input] = "";
  }
  for (const auto& node : nodes_) {
    const NodeSpec& n = node->spec;
    if (n.name.empty()) throw ConfigError(source + ": a node has an empty name");
    if (!node_names.insert(n.name).second) throw ConfigError(source + ": two nodes are named '" + n.name + "'");
    if (n.outputs.empty()) throw ConfigError(source + ": node '" + n.name + "' has no outputs");
    for (const auto& output : n.outputs) {
      auto it = producer.find(output);
      if (it != producer.end())
        throw ConfigError(source + ": blob '" + output + "' is produced by node '" + n.name + "' and also " +
                          (it->second.empty() ? "is a model input" : "by node '" + it->second + "'"));
      producer[output] = n.name;
    }
  }
  std::vector<std::string> blob_names;
  for (const auto& entry : producer) blob_names.push_back(entry.first);
  for (const auto& node : nodes_) {
    for (const auto& input : node->spec.inputs) {
      if (producer.count(input)) continue;
      std::string message = source + ": node '" + node->spec.name + "' reads '" + input +
                            "', which is neither a model input nor the output of any node";
      auto close = close_matches(input, blob_names);
      if (!close.empty()) message += "; did you mean '" + close[0] + "'?";
      throw ConfigError(message);
    }
  }
  // Kahn's algorithm; among ready nodes the earliest in the spec goes first.
  std::set<std::string> available(spec_.inputs.begin(), spec_.inputs.end());
  std::vector<std::unique_ptr<Node>> ordered;
  std::vector<std::unique_ptr<Node>> pending = std::move(nodes_);
  while (!pending.empty()) {
    auto ready = std::find_if(pending.begin(), pending.end(), [&](const std::unique_ptr<Node>& node) {
      return std::all_of(node->spec.inputs.begin(), node->spec.inputs.end(),
                         [&](const std::string& input) { return available.count(input) > 0; });
    });
    if (ready == pending.end())
      throw ConfigError(source + ": the graph has a cycle: " + describe_cycle(pending, available, producer));
    for (const auto& output : (*ready)->spec.outputs) available.insert(output);
    ordered.push_back(std::move(*ready));
    pending.erase(ready);
  }
  nodes_ = std::move(ordered);
  graph_ = BlobGraph{};
  graph_.model_inputs.insert(spec_.inputs.begin(), spec_.inputs.end());
  for (std::size_t index = 0; index < nodes_.size(); ++index) {
    graph_.nodes.push_back(&nodes_[index]->spec);
    for (const auto& output : nodes_[index]->spec.outputs) graph_.producer[output] = index;
    for (const auto& input : nodes_[index]->spec.inputs) {
      graph_.consumers[input]++;
      graph_.last_reader[input] = index;
    }
  }
}

void Net::infer_shapes(const std::map<std::string, Shape>& input_shapes, bool first_time) {
  std::map<std::string, Shape> shapes;
  for (const auto& input : spec_.inputs) {
    auto it = input_shapes.find(input);
    if (it == input_shapes.end()) throw ShapeError(spec_.source + ": no shape given for model input '" + input + "'");
    shapes[input] = it->second;
  }
  for (const auto& entry : input_shapes)
    if (!shapes.count(entry.first))
      throw ShapeError(spec_.source + ": a shape was given for '" + entry.first + "', which is not a model input");
  for (auto& node : nodes_) {
    std::vector<Shape> in;
    for (const auto& input : node->spec.inputs) in.push_back(shapes.at(input));
    std::vector<Shape> out;
    try {
      out = node->layer->output_shapes(in);
      if (out.size() != node->spec.outputs.size())
        throw ShapeError("node '" + node->spec.name + "' (" + node->spec.type + ") produces " +
                         std::to_string(out.size()) + " output(s) but the spec names " +
                         std::to_string(node->spec.outputs.size()));
      if (first_time) node->layer->create_parameters(in);
    } catch (const ShapeError& e) {
      throw ShapeError(shape_failure(*node, e.what(), shapes, input_shapes, first_time));
    } catch (const ConfigError& e) {
      throw ConfigError(shape_failure(*node, e.what(), shapes, input_shapes, first_time));
    } catch (const Error&) {
      throw;                             // device and I/O errors say what they are about
    } catch (const std::exception& e) {  // a layer's bug (e.g. an out-of-range index): still name the node
      throw Error(shape_failure(*node, e.what(), shapes, input_shapes, first_time));
    }
    for (std::size_t i = 0; i < out.size(); ++i) shapes[node->spec.outputs[i]] = out[i];
  }
  shapes_ = shapes;
  allocate_blobs();
}

void Net::allocate_blobs() {
  traits_.clear();
  for (auto& node : nodes_) traits_.push_back(node->layer->traits(device_));
  storage_plan_.plan(graph_, traits_, shapes_, activation_storage_, activation_fusion_ && !inference_only_);
  plan_memory();
  blobs_.clear();
  grads_.clear();  // allocated by the first backward(): a net that only runs forward never holds them
  ++layout_version_;
  const auto& fused_blobs = storage_plan_.fused_blobs();
  // An inference-only net allocates each blob when its producer runs (input(): a model input).
  for (const auto& entry : shapes_)
    if (!fused_blobs.count(entry.first))
      blobs_[entry.first] = inference_only_ ? Tensor() : Tensor(entry.second, blob_dtype(entry.first), device_);
  for (const auto& [blob, fused] : fused_blobs) blobs_[blob] = blobs_.at(fused.output);
  for (auto& node : nodes_) node->scratch_grads.clear();
}

void Net::plan_memory() {
  memory_plan_.plan(
      graph_, traits_, shapes_, [this](const std::string& blob) { return blob_dtype(blob); },
      inference_only_ ? &kept_ : nullptr);
}

void Net::set_activation_fusion(bool on) {
  activation_fusion_ = on;
  allocate_blobs();
}

void Net::set_activation_storage(DType storage) {
  if (storage != DType::f32 && storage != DType::bf16)
    throw ConfigError(spec_.source + ": activation storage must be f32 or bf16, not " + dtype_name(storage));
  if (storage == DType::bf16 && dtype_ != DType::f32)
    throw ConfigError(spec_.source + ": bf16 activation storage needs an f32 net, not " + dtype_name(dtype_));
  activation_storage_ = storage;
  allocate_blobs();
}

DType activation_storage_for(Precision precision, Device device, const KernelSettings& settings) {
  return precision == Precision::bf16 && device.is_cuda() && settings.bf16_storage ? DType::bf16 : DType::f32;
}

bool activation_fusion_for_training(const KernelSettings& settings) { return settings.fuse_activations; }

DType Net::blob_dtype(const std::string& name) const {
  if (!shapes_.count(name)) throw ConfigError(spec_.source + ": the model has no blob named '" + name + "'");
  return storage_plan_.stored_bf16(name) ? DType::bf16 : dtype_;
}

std::string Net::shape_failure(const Node& node, const std::string& what, const std::map<std::string, Shape>& shapes,
                               const std::map<std::string, Shape>& input_shapes, bool first_time) const {
  // Layers' messages start with "node 'x' (T): " (Layer::fail_shape); others get it here.
  const std::string who = "node '" + node.spec.name + "' (" + node.spec.type + ")";
  std::string message = spec_.source + ": " + (what.rfind(who, 0) == 0 ? what : who + ": " + what);
  message += "; its inputs: ";
  for (std::size_t i = 0; i < node.spec.inputs.size(); ++i) {
    const std::string& input = node.spec.inputs[i];
    message += (i ? ", '" : "'") + input + "' " + shape_str(shapes.at(input));
    const auto producer = graph_.producer.find(input);
    message += producer == graph_.producer.end() ? " (a model input)"
                                                 : " (from node '" + nodes_[producer->second]->spec.name + "' (" +
                                                       nodes_[producer->second]->spec.type + "))";
  }
  if (node.spec.inputs.empty()) message += "none";
  message += (first_time ? "; while building for " : "; while reshaping for ") + input_shapes_text(spec_, input_shapes);
  return message;
}

void Net::warn_about_unread_outputs() const {
  // A blob no node reads may be what the caller wants (a loss, a
  // reconstruction), so a single-output node is never suspect. A node with
  // several outputs, some read and some not, most likely has a wire missing.
  for (const auto& node : nodes_) {
    const auto& outputs = node->spec.outputs;
    const auto unread = [&](const std::string& blob) { return graph_.consumers.count(blob) == 0; };
    if (outputs.size() < 2 || std::all_of(outputs.begin(), outputs.end(), unread)) continue;
    for (const auto& output : outputs)
      if (unread(output))
        spdlog::warn("{}: node '{}' ({}) writes '{}', which no node reads; other outputs of the node are read, "
                     "so a wire may be missing",
                     spec_.source, node->spec.name, node->spec.type, output);
  }
}

void Net::reshape(const std::map<std::string, Shape>& input_shapes) {
  infer_shapes(input_shapes, /*first_time=*/false);
}

void Net::set_inference_only(const std::vector<std::string>& kept) {
  std::vector<std::string> blob_names;
  for (const auto& entry : shapes_) blob_names.push_back(entry.first);
  for (const auto& name : kept)
    if (!shapes_.count(name)) {
      std::string message = spec_.source + ": cannot keep '" + name + "': the model has no blob of that name";
      auto close = close_matches(name, blob_names);
      if (!close.empty()) message += "; did you mean '" + close[0] + "'?";
      throw ConfigError(message);
    }
  inference_only_ = true;
  kept_ = std::set<std::string>(kept.begin(), kept.end());
  storage_plan_.drop_fusion();  // an inference-only net runs every node
  plan_memory();
  grads_.clear();
  for (auto& node : nodes_) node->scratch_grads.clear();
  for (auto& entry : blobs_) entry.second = Tensor();  // allocated again by the passes
}

// A fresh (zeroed) tensor for each output not held (a kept blob is held
// from the first pass at a layout), as a net that keeps everything has from
// reshape; output 0 takes over input 0's storage where the memory plan allows it.
void Net::allocate_outputs(std::size_t index) {
  Node& node = *nodes_[index];
  for (std::size_t k = 0; k < node.spec.outputs.size(); ++k) {
    const std::string& output = node.spec.outputs[k];
    if (blobs_.at(output).defined()) continue;
    const bool in_place = k == 0 && memory_plan_.output_in_place(index);
    blobs_[output] =
        in_place ? blobs_.at(node.spec.inputs[0]) : Tensor(shapes_.at(output), blob_dtype(output), device_);
  }
}

// Whether node `index` is the last reader of its input 0, which it reads
// once and which none of its outputs shares (in place).
bool Net::input_expires(std::size_t index) const {
  if (!memory_plan_.last_read_of_input(index)) return false;
  const Node& node = *nodes_[index];
  const void* storage = blobs_.at(node.spec.inputs[0]).raw_data();
  return std::none_of(node.spec.outputs.begin(), node.spec.outputs.end(),
                      [&](const std::string& output) { return blobs_.at(output).raw_data() == storage; });
}

bool Net::has_input(const std::string& name) const {
  return std::find(spec_.inputs.begin(), spec_.inputs.end(), name) != spec_.inputs.end();
}

Tensor& Net::input(const std::string& name) {
  if (std::find(spec_.inputs.begin(), spec_.inputs.end(), name) == spec_.inputs.end())
    throw ConfigError(spec_.source + ": '" + name + "' is not a model input");
  Tensor& value = blobs_.at(name);
  if (!value.defined()) value = Tensor(shapes_.at(name), dtype_, device_);  // freed by the last inference-only pass
  return value;
}

bool Net::cuda_graph_capturable(std::string* culprit) const {
  for (const auto& node : nodes_)
    if (!node->layer->traits(device_).cuda_graph_capturable) {
      if (culprit) *culprit = "node '" + node->spec.name + "' (" + node->spec.type + ")";
      return false;
    }
  return true;
}

bool Net::has_blob(const std::string& name) const { return blobs_.count(name) > 0; }

const Tensor& Net::blob(const std::string& name) const {
  auto it = blobs_.find(name);
  if (it == blobs_.end()) throw ConfigError(spec_.source + ": the model has no blob named '" + name + "'");
  const auto fused = storage_plan_.fused_blobs().find(name);
  if (fused != storage_plan_.fused_blobs().end())
    throw ConfigError(spec_.source + ": blob '" + name + "' is not held: its producer applies node '" +
                      fused->second.activation + "' as it writes it, so its storage holds '" + fused->second.output +
                      "' (Net::set_activation_fusion)");
  if (shapes_only_)
    throw ConfigError(spec_.source + ": blob '" + name +
                      "' has no values: the net was built for its shapes only (InitialParameters::shapes_only)");
  if (!it->second.defined())
    throw ConfigError(spec_.source + ": blob '" + name +
                      "' is not held by this inference-only net, which holds only the blobs passed to "
                      "set_inference_only, from the pass that computes them");
  return it->second;
}

const Shape& Net::blob_shape(const std::string& name) const {
  auto it = shapes_.find(name);
  if (it == shapes_.end()) throw ConfigError(spec_.source + ": the model has no blob named '" + name + "'");
  return it->second;
}

const Tensor& Net::blob_grad(const std::string& name) const {
  if (!storage_plan_.fused_blobs().count(name))
    blob(name);  // names a blob that does not exist (a fused one's gradient is kept)
  if (grads_.empty())
    throw ConfigError(spec_.source + ": blob gradients exist only after backward(); '" + name + "' has none yet");
  return grads_.at(name);
}

double Net::scalar(const std::string& name) const {
  const Tensor& value = blob(name);
  if (value.numel() != 1) throw ShapeError("blob '" + name + "' is " + value.describe() + ", not a scalar");
  return value.to_values()[0];
}

void Net::forward(Context& ctx) {
  if (shapes_only_)
    throw ConfigError(spec_.source + ": model '" + spec_.name +
                      "' was built for its shapes only (InitialParameters::shapes_only): it has no weights to run");
  if (inference_only_)
    for (const auto& input : spec_.inputs)
      if (!blobs_.at(input).defined())
        throw ConfigError(spec_.source + ": model input '" + input +
                          "' was freed by the last pass of this inference-only net; fill it through input() first");
  for (std::size_t index = 0; index < nodes_.size(); ++index) {
    Node& node = *nodes_[index];
    if (inference_only_) allocate_outputs(index);
    ConstTensors in;
    MutableTensors out;
    for (const auto& input : node.spec.inputs) in.push_back(&blobs_.at(input));
    for (const auto& output : node.spec.outputs) out.push_back(&blobs_.at(output));
    if (observer_) observer_->before(node.spec.name, node.spec.type, false);
    ForwardOptions options;
    options.output_activation = storage_plan_.output_activation(index);
    if (storage_plan_.applied_by_producer(index)) {
      // its input's producer wrote the activated values into the output
    } else if (!inference_only_) {
      node.layer->forward(ctx, in, out, options);
    } else {
      options.discard_input = input_expires(index);
      try {
        node.layer->forward(ctx, in, out, options);
      } catch (...) {
        // The inputs may be partly given back: the next pass must have them filled again.
        for (const auto& input : spec_.inputs) blobs_[input] = Tensor();
        throw;
      }
      for (const auto& blob : memory_plan_.freed_after(index)) blobs_[blob] = Tensor();
    }
    if (observer_) observer_->after(node.spec.name, node.spec.type, false);
  }
}

void Net::backward(Context& ctx, const std::map<std::string, double>& loss_weights) {
  // The gradients of every blob, at the first backward of this layout (a
  // training step graph records only after an eager warm-up step, so this
  // never happens inside a capture). Inference nets (eval, compress) never
  // get here, and their memory is the activations alone.
  if (inference_only_)
    throw ConfigError(spec_.source + ": backward() on an inference-only net, which keeps no activations");
  if (!has_gradients_)
    throw ConfigError(spec_.source + ": backward() on a net built to load weights into, which has no gradients");
  if (grads_.empty()) allocate_grads();
  std::set<std::string> has_grad;
  for (const auto& entry : loss_weights) {
    blob(entry.first);  // names the loss when it does not exist
    Tensor& grad = grads_.at(entry.first);
    if (grad.numel() != 1) throw ShapeError("loss '" + entry.first + "' is " + grad.describe() + ", not a scalar");
    fill(ctx, grad, entry.second);
    has_grad.insert(entry.first);
  }
  std::set<std::string> model_inputs(spec_.inputs.begin(), spec_.inputs.end());
  // A layer's branch (e.g. a convolution's parameter gradients) runs on
  // beside the next nodes' backward: nothing here reads a parameter
  // gradient. The observer sees a node's work complete, and the caller the
  // whole backward (joined when `deferred` ends); the gradients-ready hook
  // joins only when it reads gradients (most of its calls just count nodes).
  Context::DeferredJoins deferred(ctx);
  const auto gradients_ready = [&](const std::string& node_name) {
    if (gradients_ready_) gradients_ready_(ctx, node_name);
  };
  for (std::size_t index = nodes_.size(); index-- > 0;) {
    Node& node = *nodes_[index];
    bool any = false;
    for (const auto& output : node.spec.outputs) any = any || has_grad.count(output);
    if (!any) {  // nothing downstream of this node reaches a loss
      gradients_ready(node.spec.name);
      continue;
    }
    for (const auto& output : node.spec.outputs)
      if (!has_grad.count(output)) grads_.at(output).fill_zero();
    ConstTensors in, out, dout;
    MutableTensors din;
    for (const auto& output : node.spec.outputs) {
      out.push_back(&blobs_.at(output));
      dout.push_back(&grads_.at(output));
    }
    // The first contribution to an input's gradient is written into it
    // directly; a later one (another reader's, this node's for an input it
    // reads twice, or any for a loss that is also read) into the scratch,
    // then added.
    std::set<std::string> written_directly;
    for (std::size_t i = 0; i < node.spec.inputs.size(); ++i) {
      const std::string& input = node.spec.inputs[i];
      in.push_back(&blobs_.at(input));
      bool wanted = !model_inputs.count(input) && traits_[index].input_is_differentiable(static_cast<int>(i));
      if (!wanted) {
        din.push_back(nullptr);
      } else if (!has_grad.count(input) && written_directly.insert(input).second) {
        din.push_back(&grads_.at(input));
      } else {
        Tensor& scratch = node.scratch_grads[i];
        if (!scratch.defined()) scratch = Tensor(shapes_.at(input), blob_dtype(input), device_);
        din.push_back(&scratch);
      }
    }
    if (observer_) observer_->before(node.spec.name, node.spec.type, true);
    node.layer->backward(ctx, in, out, dout, din);
    if (observer_) {
      ctx.join_branches();
      observer_->after(node.spec.name, node.spec.type, true);
    }
    for (std::size_t i = 0; i < node.spec.inputs.size(); ++i) {
      if (!din[i]) continue;
      const std::string& input = node.spec.inputs[i];
      if (din[i] == &node.scratch_grads[i]) add_into(ctx, grads_.at(input), *din[i]);
      has_grad.insert(input);
    }
    gradients_ready(node.spec.name);
  }
}

void Net::allocate_grads() {
  const auto& shared_with = memory_plan_.shared_gradients();
  // Blobs in reverse order of production: a node's output (shared with a
  // later node's output, or made) before the inputs that share it.
  const auto made_or_shared = [&](const std::string& blob) {
    auto shared = shared_with.find(blob);
    grads_[blob] =
        shared == shared_with.end() ? Tensor(shapes_.at(blob), blob_dtype(blob), device_) : grads_.at(shared->second);
  };
  for (auto node = nodes_.rbegin(); node != nodes_.rend(); ++node)
    for (const auto& output : (*node)->spec.outputs) made_or_shared(output);
  for (const auto& input : spec_.inputs) made_or_shared(input);
  for (auto& node : nodes_)
    for (const auto& input : node->spec.inputs)
      node->scratch_grads.push_back(
          graph_.consumers.at(input) > 1 ? Tensor(shapes_.at(input), blob_dtype(input), device_) : Tensor());
}

void Net::zero_grad() {
  if (!has_gradients_) return;
  std::vector<Tensor*> grads;
  for (auto& node : nodes_)
    for (Parameter* p : node->layer->parameters()) grads.push_back(&p->grad);
  fill_zero(grads);
}

std::vector<NamedParameter> Net::parameters() {
  std::vector<NamedParameter> result;
  for (auto& node : nodes_)
    for (Parameter* p : node->layer->parameters()) result.push_back({node->spec.name + "." + p->name, p});
  std::sort(result.begin(), result.end(),
            [](const NamedParameter& a, const NamedParameter& b) { return a.name < b.name; });
  return result;
}

std::vector<NamedParameter> Net::trainable_parameters() {
  std::vector<NamedParameter> result = parameters();
  result.erase(std::remove_if(result.begin(), result.end(),
                              [](const NamedParameter& named) { return !named.parameter->trainable; }),
               result.end());
  return result;
}

void Net::after_update(Context& ctx, std::int64_t updates_taken) {
  for (auto& node : nodes_) node->layer->after_update(ctx, updates_taken);
}

std::int64_t Net::parameter_count() const {
  std::int64_t count = 0;
  for (const auto& node : nodes_)
    for (Parameter* p : node->layer->parameters())
      if (p->trainable) count += shape_numel(p->shape);
  return count;
}

std::vector<std::string> Net::execution_order() const {
  std::vector<std::string> names;
  for (const auto& node : nodes_) names.push_back(node->spec.name);
  return names;
}

Layer& Net::layer(const std::string& node_name) {
  for (auto& node : nodes_)
    if (node->spec.name == node_name) return *node->layer;
  throw ConfigError(spec_.source + ": no node named '" + node_name + "'");
}

}  // namespace plexus

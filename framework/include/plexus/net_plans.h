#pragma once
// The plans a Net makes at each layout, apart from the Net that carries
// them out:
//   StoragePlan: which blobs are stored in bf16 (Net::set_activation_storage)
//     and which activations their producers apply (Net::set_activation_fusion);
//   MemoryPlan: which blobs share their gradient's storage with another's,
//     and, for a net that runs forward only (Net::set_inference_only), which
//     node writes its output over its input and which blobs each node frees.
// Both read the graph as a BlobGraph and each node's LayerTraits on the
// net's device; neither allocates a tensor.
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "plexus/layer.h"
#include "plexus/model_spec.h"

namespace plexus {

// The data flow of a net: its nodes in execution order and, per blob, who
// writes it and who reads it.
struct BlobGraph {
  std::vector<const NodeSpec*> nodes;              // in execution order
  std::set<std::string> model_inputs;              // the spec's inputs
  std::map<std::string, int> consumers;            // how many node inputs read each blob
  std::map<std::string, std::size_t> last_reader;  // blob -> position in `nodes` of the last node reading it
  std::map<std::string, std::size_t> producer;     // blob -> position of the node writing it (not model inputs)
};

class StoragePlan {
 public:
  // A producer's output whose activation the producer applies: the
  // activation node's name and its output, whose storage the blob shares.
  struct FusedBlob {
    std::string activation;
    std::string output;
  };

  // Plans the layout `shapes`. Activation storage DType::f32: every blob in
  // the net's dtype. DType::bf16: a blob that is no model input, read by one
  // node, whose producer and reader both store bf16 (LayerTraits::stores_bf16)
  // is bf16. Then, when `fuse_activations`: each activation node
  // (LayerTraits::fused_activation) whose one input is output 0 of a node
  // that applies activations (LayerTraits::applies_output_activation), read
  // by it alone, of the activation's shape, and whose producer takes the
  // activation output's dtype, is applied by that producer; the blob takes
  // its activation output's dtype.
  void plan(const BlobGraph& graph, const std::vector<LayerTraits>& traits, const std::map<std::string, Shape>& shapes,
            DType activation_storage, bool fuse_activations);
  // No activation applied by its producer any more; the dtypes stay.
  void drop_fusion();

  bool stored_bf16(const std::string& blob) const { return bf16_blobs_.count(blob) > 0; }
  std::size_t bf16_blob_count() const { return bf16_blobs_.size(); }
  const std::map<std::string, FusedBlob>& fused_blobs() const { return fused_blobs_; }
  // Whether node `node`'s input's producer applies it (its forward is skipped).
  bool applied_by_producer(std::size_t node) const { return applied_by_producer_.at(node); }
  // The activation node `node` applies to its output 0 (inactive: none).
  const FusedActivation& output_activation(std::size_t node) const { return output_activation_.at(node); }

 private:
  std::set<std::string> bf16_blobs_;
  std::map<std::string, FusedBlob> fused_blobs_;
  std::vector<bool> applied_by_producer_;
  std::vector<FusedActivation> output_activation_;
};

class MemoryPlan {
 public:
  using BlobDType = std::function<DType(const std::string& blob)>;

  // Plans the layout `shapes`, blobs stored in `dtype_of`'s dtypes.
  // Gradients: a blob whose one reader passes its output's gradient on
  // unchanged (InputGradient::kOutputGrad) shares that gradient's storage,
  // when it is no model input, both are stored alike and it is no scalar.
  // `kept`: for a net that runs forward only, the blobs it holds between
  // passes; null for a net that keeps every blob.
  void plan(const BlobGraph& graph, const std::vector<LayerTraits>& traits, const std::map<std::string, Shape>& shapes,
            const BlobDType& dtype_of, const std::set<std::string>* kept);

  // Blob -> the blob whose gradient storage it shares.
  const std::map<std::string, std::string>& shared_gradients() const { return shared_gradients_; }

  // A net that runs forward only: whether a pass keeps `blob` (a kept blob).
  bool holds_between_passes(const std::string& blob) const { return kept_.count(blob) > 0; }
  // Whether node `node`'s output 0 may take its input 0's storage: the layer
  // allows it (LayerTraits::forward_in_place), the input is not kept, read by
  // this node last and once, of the output's shape and dtype.
  bool output_in_place(std::size_t node) const { return nodes_.at(node).output_in_place; }
  // Whether node `node` reads its input 0 last and once, and the input is not kept.
  bool last_read_of_input(std::size_t node) const { return nodes_.at(node).last_read_of_input; }
  // The blobs to free after node `node` runs: the inputs it read last and the
  // outputs nobody reads, unless kept.
  const std::vector<std::string>& freed_after(std::size_t node) const { return nodes_.at(node).freed_after; }

 private:
  struct NodeMemory {
    bool output_in_place = false;
    bool last_read_of_input = false;
    std::vector<std::string> freed_after;
  };
  void plan_gradients(const BlobGraph& graph, const std::vector<LayerTraits>& traits,
                      const std::map<std::string, Shape>& shapes, const BlobDType& dtype_of);
  std::map<std::string, std::string> shared_gradients_;
  std::set<std::string> kept_;
  std::vector<NodeMemory> nodes_;
};

}  // namespace plexus

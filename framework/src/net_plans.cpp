#include "plexus/net_plans.h"

#include <algorithm>

namespace plexus {

void StoragePlan::plan(const BlobGraph& graph, const std::vector<LayerTraits>& traits,
                       const std::map<std::string, Shape>& shapes, DType activation_storage, bool fuse_activations) {
  bf16_blobs_.clear();
  if (activation_storage == DType::bf16)
    for (const auto& [blob, producer] : graph.producer) {
      const auto readers = graph.consumers.find(blob);
      if (readers == graph.consumers.end() || readers->second != 1) continue;  // none, or several (their sum is f32)
      if (traits[producer].stores_bf16 && traits[graph.last_reader.at(blob)].stores_bf16) bf16_blobs_.insert(blob);
    }
  fused_blobs_.clear();
  applied_by_producer_.assign(graph.nodes.size(), false);
  output_activation_.assign(graph.nodes.size(), FusedActivation{});
  if (!fuse_activations) return;
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const NodeSpec& node = *graph.nodes[index];
    const FusedActivation& activation = traits[index].fused_activation;
    if (!activation.active || node.inputs.size() != 1 || node.outputs.size() != 1) continue;
    const std::string& blob = node.inputs[0];
    const std::string& output = node.outputs[0];
    const auto producer = graph.producer.find(blob);
    if (producer == graph.producer.end() || graph.consumers.at(blob) != 1 || shapes.at(blob) != shapes.at(output))
      continue;
    if (graph.nodes[producer->second]->outputs[0] != blob)
      continue;  // a producer applies activations to its output 0 only
    const LayerTraits& source = traits[producer->second];
    const bool bf16_output = stored_bf16(output);
    if (!source.applies_output_activation || (bf16_output && !source.takes_bf16())) continue;
    output_activation_[producer->second] = activation;
    applied_by_producer_[index] = true;
    fused_blobs_[blob] = {node.name, output};
    if (bf16_output) bf16_blobs_.insert(blob);
    else bf16_blobs_.erase(blob);
  }
}

void StoragePlan::drop_fusion() {
  fused_blobs_.clear();
  std::fill(applied_by_producer_.begin(), applied_by_producer_.end(), false);
  std::fill(output_activation_.begin(), output_activation_.end(), FusedActivation{});
}

void MemoryPlan::plan(const BlobGraph& graph, const std::vector<LayerTraits>& traits,
                      const std::map<std::string, Shape>& shapes, const BlobDType& dtype_of,
                      const std::set<std::string>* kept) {
  plan_gradients(graph, traits, shapes, dtype_of);
  kept_ = kept ? *kept : std::set<std::string>();
  nodes_.assign(graph.nodes.size(), NodeMemory{});
  if (!kept) return;
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const NodeSpec& node = *graph.nodes[index];
    NodeMemory& memory = nodes_[index];
    const auto& inputs = node.inputs;
    memory.last_read_of_input = !inputs.empty() && !holds_between_passes(inputs[0]) &&
                                graph.last_reader.at(inputs[0]) == index &&
                                std::count(inputs.begin(), inputs.end(), inputs[0]) == 1;
    memory.output_in_place = memory.last_read_of_input && traits[index].forward_in_place &&
                             shapes.at(inputs[0]) == shapes.at(node.outputs[0]) &&
                             dtype_of(inputs[0]) == dtype_of(node.outputs[0]);
    for (const auto& input : inputs)
      if (graph.last_reader.at(input) == index && !holds_between_passes(input)) memory.freed_after.push_back(input);
    for (const auto& output : node.outputs)
      if (!graph.consumers.count(output) && !holds_between_passes(output)) memory.freed_after.push_back(output);
  }
}

void MemoryPlan::plan_gradients(const BlobGraph& graph, const std::vector<LayerTraits>& traits,
                                const std::map<std::string, Shape>& shapes, const BlobDType& dtype_of) {
  shared_gradients_.clear();
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const NodeSpec& node = *graph.nodes[index];
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& input = node.inputs[i];
      const std::string& output = node.outputs[0];
      if (traits[index].input_gradient(static_cast<int>(i)) == InputGradient::kOutputGrad &&
          graph.consumers.at(input) == 1 && !graph.model_inputs.count(input) && shapes.at(input) == shapes.at(output) &&
          dtype_of(input) == dtype_of(output) && shape_numel(shapes.at(output)) > 1)
        shared_gradients_[input] = output;
    }
  }
}

}  // namespace plexus

#include "codec_graph.h"

#include <map>
#include <set>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/net.h"

namespace plexus::ae {

namespace {

// The nodes of `spec` (in spec order) that compute `targets` from the blobs in `given`.
std::vector<NodeSpec> nodes_for(const ModelSpec& spec, const std::vector<std::string>& targets,
                                const std::set<std::string>& given, const std::string& what) {
  std::map<std::string, const NodeSpec*> producer;
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& output : node.outputs) producer[output] = &node;
  std::set<std::string> chosen, seen;
  std::vector<std::string> pending = targets;
  while (!pending.empty()) {
    const std::string blob = pending.back();
    pending.pop_back();
    if (given.count(blob) || !seen.insert(blob).second) continue;
    auto it = producer.find(blob);
    if (it == producer.end())
      throw NotCodable(spec.source,
                       "its " + what + " needs '" + blob + "'" +
                           (blob == kImage ? ", so \"x_hat\" depends on the image other than through the latent"
                                           : ", which no node produces"));
    if (chosen.insert(it->second->name).second)
      pending.insert(pending.end(), it->second->inputs.begin(), it->second->inputs.end());
  }
  std::vector<NodeSpec> nodes;
  for (const NodeSpec& node : spec.nodes)
    if (chosen.count(node.name)) nodes.push_back(node);
  return nodes;
}

}  // namespace

CodecGraph split_for_coding(const ModelSpec& spec) {
  std::vector<const NodeSpec*> entropy, gaussian;
  for (const NodeSpec& node : spec.nodes) {
    if (node.type == kEntropyModelType) entropy.push_back(&node);
    if (node.type == kGaussianType) gaussian.push_back(&node);
  }
  if (entropy.size() != 1 || entropy[0]->inputs.size() != 1)
    throw NotCodable(spec.source, std::string("it needs exactly one ") + kEntropyModelType +
                                      " node (with one input, the " + (gaussian.empty() ? "latent" : "hyper-latent") +
                                      "), found " + std::to_string(entropy.size()));
  if (gaussian.size() > 1)
    throw NotCodable(spec.source, "it has " + std::to_string(gaussian.size()) + " " + kGaussianType +
                                      " nodes; the scale hyperprior codes one latent");
  CodecGraph graph;
  graph.entropy_node = entropy[0]->name;
  graph.factorized_latent = entropy[0]->inputs[0];
  graph.latent = graph.factorized_latent;
  std::vector<std::string> analysed = {graph.latent};
  if (!gaussian.empty()) {
    const NodeSpec& node = *gaussian[0];
    if (node.inputs.size() != 2 && node.inputs.size() != 3)
      throw NotCodable(spec.source, std::string("its ") + kGaussianType + " node '" + node.name + "' has " +
                                        std::to_string(node.inputs.size()) +
                                        " inputs; the codec handles [latent, scales] and [latent, scales, means]");
    const bool means = node.inputs.size() == 3;
    graph.kind = means ? ModelKind::mean_scale_hyperprior : ModelKind::hyperprior;
    graph.gaussian_node = node.name;
    graph.latent = node.inputs[0];
    graph.hyper_latent = graph.factorized_latent;
    graph.parameter_blobs = {graph.hyper_latent, node.inputs[1], means ? node.inputs[2] : std::string()};
    analysed = {graph.latent, graph.hyper_latent};
    if (means) {
      const NodeSpec* quantizer = nullptr;
      for (const NodeSpec& candidate : spec.nodes)
        for (const std::string& output : candidate.outputs)
          if (output == graph.latent) quantizer = &candidate;
      if (quantizer && quantizer->type == "Concat")
        throw NotCodable(spec.source, "its latent '" + graph.latent + "' joins " +
                                          std::to_string(quantizer->inputs.size()) +
                                          " slices, each quantised around its own means (a channel-conditional "
                                          "model); the codec codes one latent quantised at once, not slice by slice");
      if (!quantizer || quantizer->type != kMeanQuantizerType || quantizer->inputs.size() != 2 ||
          quantizer->inputs[1] != node.inputs[2])
        throw NotCodable(spec.source, "its latent '" + graph.latent + "' must be the output of a " +
                                          kMeanQuantizerType + " node reading [y, '" + node.inputs[2] +
                                          "'] (the means of " + kGaussianType + " '" + node.name +
                                          "'), so that the codec can quantise around the integer means");
      graph.unquantized = quantizer->inputs[0];
      analysed = {graph.unquantized, graph.hyper_latent};
      if (quantizer->outputs.size() == 2) graph.synthesis_input = quantizer->outputs[1];
    }
  }
  graph.analysis.name = spec.name + " analysis";
  graph.analysis.source = spec.source + " (analysis)";
  graph.analysis.inputs = {kImage};
  graph.analysis.nodes = nodes_for(spec, analysed, {kImage}, "analysis");
  graph.synthesis.name = spec.name + " synthesis";
  graph.synthesis.source = spec.source + " (synthesis)";
  if (graph.synthesis_input.empty()) graph.synthesis_input = graph.latent;
  graph.synthesis.inputs = {graph.synthesis_input};
  graph.synthesis.nodes = nodes_for(spec, {kReconstruction}, {graph.synthesis_input}, "synthesis");
  graph.density.source = spec.source + " (entropy model)";
  graph.density.inputs = {graph.factorized_latent};
  graph.density.nodes = {*entropy[0]};
  return graph;
}

const std::string& analysed_latent(const CodecGraph& graph) {
  return graph.unquantized.empty() ? graph.latent : graph.unquantized;
}

HyperpriorGeometry probe_hyperprior_geometry(const CodecGraph& graph, const ModelSpec& spec, const Registry& registry) {
  constexpr std::int64_t kProbeSide = 256;
  Net probe(graph.analysis, registry, {{kImage, Shape{1, 3, kProbeSide, kProbeSide}}});
  const Shape& z = probe.blob(graph.hyper_latent).shape();
  const Shape& y = probe.blob(analysed_latent(graph)).shape();
  if (z.size() != 4 || y.size() != 4 || z[2] < 1 || z[3] != z[2] || y[3] != y[2] || kProbeSide % z[2] != 0 ||
      y[2] % z[2] != 0)
    throw NotCodable(spec.source, "a " + std::to_string(kProbeSide) + "-pixel square image gives a latent '" +
                                      graph.latent + "' of " + shape_str(y) + " and a hyper-latent '" +
                                      graph.hyper_latent + "' of " + shape_str(z) +
                                      "; the hyper-latent's side must divide both the image's and the latent's");
  return HyperpriorGeometry{static_cast<int>(kProbeSide / z[2]), static_cast<int>(y[2] / z[2])};
}

}  // namespace plexus::ae

#include "codec_graph.h"

#include <algorithm>
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

// A variable-rate model's parts read "level" where their gain units are.
void add_rate_level_input(ModelSpec& part) {
  for (const NodeSpec& node : part.nodes)
    if (std::find(node.inputs.begin(), node.inputs.end(), kRateLevel) != node.inputs.end()) {
      part.inputs.push_back(kRateLevel);
      return;
    }
}

std::map<std::string, const NodeSpec*> producers(const ModelSpec& spec) {
  std::map<std::string, const NodeSpec*> producer;
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& output : node.outputs) producer[output] = &node;
  return producer;
}

const NodeSpec* producer_of(const std::map<std::string, const NodeSpec*>& producer, const std::string& blob) {
  auto it = producer.find(blob);
  return it == producer.end() ? nullptr : it->second;
}

// The largest k of the rounded slices `rounded` that `blob` depends on
// (-1: none), walking the producers back (memoised in `seen`).
int latest_slice(const std::map<std::string, const NodeSpec*>& producer, const std::vector<std::string>& rounded,
                 const std::string& blob, std::map<std::string, int>& seen) {
  if (auto it = seen.find(blob); it != seen.end()) return it->second;
  seen[blob] = -1;  // a cycle adds nothing
  for (std::size_t k = 0; k < rounded.size(); ++k)
    if (rounded[k] == blob) return seen[blob] = static_cast<int>(k);
  int latest = -1;
  if (const NodeSpec* node = producer_of(producer, blob))
    for (const std::string& input : node->inputs)
      latest = std::max(latest, latest_slice(producer, rounded, input, seen));
  return seen[blob] = latest;
}

// The channel-conditional structure (see split_for_coding), with `joined`
// the Concat giving the GaussianConditional's latent.
void split_channel_conditional(const ModelSpec& spec, const NodeSpec& gaussian, const NodeSpec& joined,
                               CodecGraph& graph) {
  const auto producer = producers(spec);
  auto refuse = [&](const std::string& reason) {
    throw NotCodable(spec.source, "its latent '" + graph.latent + "' joins " + std::to_string(joined.inputs.size()) +
                                      " slices (a channel-conditional model), and " + reason);
  };
  const std::size_t slices = joined.inputs.size();
  std::vector<std::string> means;
  for (std::size_t k = 0; k < slices; ++k) {
    const NodeSpec* q = producer_of(producer, joined.inputs[k]);
    if (!q || q->type != kMeanQuantizerType || q->inputs.size() != 2 || q->outputs.size() != 2 ||
        q->outputs[0] != joined.inputs[k])
      refuse("slice " + std::to_string(k) + " ('" + joined.inputs[k] + "') must be the first output of a " +
             kMeanQuantizerType + " node reading [y, means] whose second output, the rounded slice, the decoder reads");
    graph.analysed.push_back(q->inputs[0]);
    means.push_back(q->inputs[1]);
    graph.parameter_blobs.rounded.push_back(q->outputs[1]);
  }
  const NodeSpec* means_join = producer_of(producer, gaussian.inputs[2]);
  if (!means_join || means_join->type != "Concat" || means_join->inputs != means)
    refuse("the means '" + gaussian.inputs[2] + "' must be a Concat of the slices' means, in slice order");
  const NodeSpec* scales_join = producer_of(producer, gaussian.inputs[1]);
  if (!scales_join || scales_join->type != "Concat" || scales_join->inputs.size() != slices)
    refuse("the scales '" + gaussian.inputs[1] + "' must be a Concat of " + std::to_string(slices) +
           " blobs, slice by slice");
  std::map<std::string, int> seen;
  for (std::size_t k = 0; k < slices; ++k)
    for (const std::string& blob : {scales_join->inputs[k], means[k]}) {
      const int latest = latest_slice(producer, graph.parameter_blobs.rounded, blob, seen);
      if (latest >= static_cast<int>(k))
        refuse("slice " + std::to_string(k) + "'s '" + blob + "' reads slice " + std::to_string(latest) +
               ", which the decoder has not decoded yet (slice k's scales and means may read only slices before k)");
    }
  // The decoded latent: a Concat of, slice by slice, the rounded slice or an Add of it and another value.
  for (const NodeSpec& node : spec.nodes) {
    if (node.type != "Concat" || node.inputs.size() != slices || node.outputs.size() != 1) continue;
    bool decoded = true;
    for (std::size_t k = 0; k < slices && decoded; ++k) {
      const std::string& rounded = graph.parameter_blobs.rounded[k];
      const NodeSpec* add = producer_of(producer, node.inputs[k]);
      decoded = node.inputs[k] == rounded || (add && add->type == "Add" && add->inputs.size() == 2 &&
                                              (add->inputs[0] == rounded || add->inputs[1] == rounded));
    }
    if (decoded) graph.synthesis_input = node.outputs[0];
  }
  if (graph.synthesis_input.empty())
    refuse("no Concat joins the decoded slices (each its rounded slice, or an Add of it and the latent residual "
           "prediction) for the synthesis to read");
  graph.parameter_blobs.decoded = graph.synthesis_input;
  graph.kind = ModelKind::channel_conditional;
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
  graph.analysed = {graph.latent};
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
    graph.parameter_blobs = EntropyParameterBlobs{};
    graph.parameter_blobs.hyper_latent = graph.hyper_latent;
    graph.parameter_blobs.scales = node.inputs[1];
    if (means) graph.parameter_blobs.means = node.inputs[2];
    graph.analysed = {graph.latent};
    if (means) {
      const NodeSpec* quantizer = nullptr;
      for (const NodeSpec& candidate : spec.nodes)
        for (const std::string& output : candidate.outputs)
          if (output == graph.latent) quantizer = &candidate;
      if (quantizer && quantizer->type == "Concat") {
        graph.analysed.clear();
        split_channel_conditional(spec, node, *quantizer, graph);
      } else if (!quantizer || quantizer->type != kMeanQuantizerType || quantizer->inputs.size() != 2 ||
                 quantizer->inputs[1] != node.inputs[2]) {
        throw NotCodable(spec.source, "its latent '" + graph.latent + "' must be the output of a " +
                                          kMeanQuantizerType + " node reading [y, '" + node.inputs[2] +
                                          "'] (the means of " + kGaussianType + " '" + node.name +
                                          "'), so that the codec can quantise around the integer means");
      } else {
        graph.analysed = {quantizer->inputs[0]};
        if (quantizer->outputs.size() == 2) graph.synthesis_input = quantizer->outputs[1];
      }
    }
  }
  std::vector<std::string> analysed = graph.analysed;
  if (!graph.hyper_latent.empty()) analysed.push_back(graph.hyper_latent);
  graph.analysis.name = spec.name + " analysis";
  graph.analysis.source = spec.source + " (analysis)";
  graph.analysis.inputs = {kImage};
  graph.analysis.nodes = nodes_for(spec, analysed, {kImage, kRateLevel}, "analysis");
  add_rate_level_input(graph.analysis);
  graph.synthesis.name = spec.name + " synthesis";
  graph.synthesis.source = spec.source + " (synthesis)";
  if (graph.synthesis_input.empty()) graph.synthesis_input = graph.latent;
  graph.synthesis.inputs = {graph.synthesis_input};
  graph.synthesis.nodes = nodes_for(spec, {kReconstruction}, {graph.synthesis_input, kRateLevel}, "synthesis");
  add_rate_level_input(graph.synthesis);
  graph.density.source = spec.source + " (entropy model)";
  graph.density.inputs = {graph.factorized_latent};
  graph.density.nodes = {*entropy[0]};
  return graph;
}

HyperpriorGeometry probe_hyperprior_geometry(const CodecGraph& graph, const ModelSpec& spec, const Registry& registry) {
  constexpr std::int64_t kProbeSide = 256;
  Net probe(graph.analysis, registry, model_input_shapes(graph.analysis, Shape{1, 3, kProbeSide, kProbeSide}));
  const Shape& z = probe.blob(graph.hyper_latent).shape();
  const Shape& y = probe.blob(graph.analysed[0]).shape();
  if (z.size() != 4 || y.size() != 4 || z[2] < 1 || z[3] != z[2] || y[3] != y[2] || kProbeSide % z[2] != 0 ||
      y[2] % z[2] != 0)
    throw NotCodable(spec.source, "a " + std::to_string(kProbeSide) + "-pixel square image gives a latent '" +
                                      graph.latent + "' of " + shape_str(y) + " and a hyper-latent '" +
                                      graph.hyper_latent + "' of " + shape_str(z) +
                                      "; the hyper-latent's side must divide both the image's and the latent's");
  HyperpriorGeometry geometry{static_cast<int>(kProbeSide / z[2]), static_cast<int>(y[2] / z[2]), {}};
  for (const std::string& blob : graph.analysed) {
    const Shape& slice = probe.blob(blob).shape();
    if (slice.size() != 4 || slice[2] != y[2] || slice[3] != y[3])
      throw NotCodable(spec.source, "its latent slices differ in size ('" + blob + "' is " + shape_str(slice) + ", '" +
                                        graph.analysed[0] + "' " + shape_str(y) + ")");
    geometry.analysed_channels.push_back(static_cast<std::int32_t>(slice[1]));
  }
  return geometry;
}

}  // namespace plexus::ae

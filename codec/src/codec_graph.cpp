#include "codec_graph.h"

#include <algorithm>
#include <map>
#include <set>

#include "plexus/checksum.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/net.h"

namespace plexus::codec {

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

// ---- The section: its keys ----

[[noreturn]] void malformed(const std::string& source, const std::string& where, const std::string& what) {
  throw NotCodable(source, "its codec section at " + where + " " + what);
}

std::string string_key(const nlohmann::json& codec, const char* key, const std::string& source,
                       const std::string& where) {
  if (!codec.contains(key)) malformed(source, where, std::string("needs \"") + key + "\" (a node name)");
  if (!codec[key].is_string() || codec[key].get<std::string>().empty())
    malformed(source, where + "/" + key, "must be a node name, got " + codec[key].dump());
  return codec[key].get<std::string>();
}

void check_keys(const nlohmann::json& codec, const std::vector<std::string>& known, const std::string& source,
                const std::string& where) {
  for (auto it = codec.begin(); it != codec.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      std::string list;
      for (const std::string& key : known) list += (list.empty() ? "" : ", ") + key;
      malformed(source, where,
                "has an unknown key '" + it.key() + "' (a '" + codec.value("type", "") + "' latent codec takes " +
                    list + ")");
    }
}

// A channel group's checkerboard keys: all three or none, and every group alike.
void parse_group_checkerboard(const nlohmann::json& group, std::size_t k, const std::string& source,
                              const std::string& at, LatentCodec& result) {
  const bool checkerboard =
      group.contains("context_input") || group.contains("anchor_mask") || group.contains("context_mask");
  if (k > 0 && checkerboard != !result.group_checkerboards.empty())
    malformed(source, at,
              std::string(checkerboard ? "holds" : "lacks") +
                  " a checkerboard's keys (context_input, anchor_mask, context_mask) where group 0 " +
                  (checkerboard ? "does not" : "holds them") +
                  "; the groups are all coded as checkerboards or all whole");
  if (!checkerboard) return;
  result.group_checkerboards.push_back({string_key(group, "context_input", source, at),
                                        string_key(group, "anchor_mask", source, at),
                                        string_key(group, "context_mask", source, at)});
}

LatentCodec parse_latent_codec(const nlohmann::json& codec, const std::string& source, const std::string& where) {
  if (!codec.is_object()) malformed(source, where, "must be an object (a latent codec), got " + codec.dump());
  if (!codec.contains("type") || !codec["type"].is_string())
    malformed(source, where,
              "needs a \"type\": factorized, gaussian, hyperprior, channel_groups, checkerboard or autoregressive");
  LatentCodec result;
  result.type = codec["type"].get<std::string>();
  result.where = where;
  if (result.type == "factorized") {
    check_keys(codec, {"type", "entropy_model"}, source, where);
    result.entropy_model = string_key(codec, "entropy_model", source, where);
  } else if (result.type == "gaussian") {
    check_keys(codec, {"type", "conditional", "distribution", "quantizer", "components"}, source, where);
    result.conditional = string_key(codec, "conditional", source, where);
    const nlohmann::json distribution = codec.value("distribution", nlohmann::json());
    result.distribution = distribution.is_string() ? distribution.get<std::string>() : std::string();
    if (result.distribution != "scale" && result.distribution != "mean_scale" && result.distribution != "mixture")
      malformed(source, where + "/distribution",
                "must be \"scale\", \"mean_scale\" or \"mixture\", got " +
                    (distribution.is_null() ? std::string("nothing") : distribution.dump()));
    if (result.distribution == "mean_scale") result.quantizer = string_key(codec, "quantizer", source, where);
    if (codec.contains("quantizer") && result.distribution != "mean_scale")
      malformed(source, where + "/quantizer", "applies only to a \"mean_scale\" distribution");
    if (result.distribution == "mixture") {
      if (!codec.contains("components") || !codec["components"].is_number_integer() ||
          codec["components"].get<std::int64_t>() < 2 || codec["components"].get<std::int64_t>() > 16)
        malformed(source, where + "/components", "must be the mixture's component count, 2 to 16");
      result.components = codec["components"].get<int>();
    } else if (codec.contains("components")) {
      malformed(source, where + "/components", "applies only to a \"mixture\" distribution");
    }
  } else if (result.type == "hyperprior") {
    check_keys(codec, {"type", "z", "y"}, source, where);
    for (const char* part : {"z", "y"}) {
      if (!codec.contains(part))
        malformed(source, where,
                  std::string("needs \"") + part + "\" (the latent codec of " +
                      (part[0] == 'z' ? "the hyper-latent)" : "the latent)"));
      result.children.push_back(parse_latent_codec(codec[part], source, where + "/" + part));
    }
  } else if (result.type == "channel_groups") {
    check_keys(codec, {"type", "conditional", "groups", "decoded"}, source, where);
    result.conditional = string_key(codec, "conditional", source, where);
    result.decoded = string_key(codec, "decoded", source, where);
    if (!codec.contains("groups") || !codec["groups"].is_array() || codec["groups"].size() < 2)
      malformed(source, where + "/groups", "must list at least two groups, each {\"quantizer\": node}");
    for (std::size_t k = 0; k < codec["groups"].size(); ++k) {
      const nlohmann::json& group = codec["groups"][k];
      const std::string at = where + "/groups/" + std::to_string(k);
      if (!group.is_object()) malformed(source, at, "must be an object {\"quantizer\": node}, got " + group.dump());
      for (auto it = group.begin(); it != group.end(); ++it)
        if (it.key() != "quantizer" && it.key() != "context_input" && it.key() != "anchor_mask" &&
            it.key() != "context_mask")
          malformed(source, at,
                    "has an unknown key '" + it.key() +
                        "' (a group takes quantizer); a checkerboard-coded group also takes context_input, "
                        "anchor_mask and context_mask");
      result.groups.push_back(string_key(group, "quantizer", source, at));
      parse_group_checkerboard(group, k, source, at, result);
    }
  } else if (result.type == "checkerboard") {
    check_keys(codec, {"type", "conditional", "quantizer", "context_input", "anchor_mask", "context_mask"}, source,
               where);
    result.conditional = string_key(codec, "conditional", source, where);
    result.quantizer = string_key(codec, "quantizer", source, where);
    result.context_input = string_key(codec, "context_input", source, where);
    result.anchor_mask = string_key(codec, "anchor_mask", source, where);
    result.context_mask = string_key(codec, "context_mask", source, where);
  } else if (result.type == "autoregressive") {
    check_keys(codec, {"type", "conditional", "quantizer", "context_input", "context"}, source, where);
    result.conditional = string_key(codec, "conditional", source, where);
    result.quantizer = string_key(codec, "quantizer", source, where);
    result.context_input = string_key(codec, "context_input", source, where);
    result.context = string_key(codec, "context", source, where);
  } else {
    malformed(source, where + "/type",
              "is '" + result.type +
                  "'; a latent codec is factorized, gaussian, hyperprior, channel_groups, checkerboard or "
                  "autoregressive");
  }
  return result;
}

// ---- The section of a spec without one ----

nlohmann::json infer_section(const ModelSpec& spec) {
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
  const nlohmann::json factorized = {{"type", "factorized"}, {"entropy_model", entropy[0]->name}};
  if (gaussian.empty()) return factorized;
  const NodeSpec& node = *gaussian[0];
  if (node.inputs.size() != 2 && node.inputs.size() != 3)
    throw NotCodable(spec.source, std::string("its ") + kGaussianType + " node '" + node.name + "' has " +
                                      std::to_string(node.inputs.size()) +
                                      " inputs; the codec handles [latent, scales] and [latent, scales, means]");
  nlohmann::json y = {{"type", "gaussian"}, {"conditional", node.name}, {"distribution", "scale"}};
  if (node.inputs.size() == 3) {
    const auto producer = producers(spec);
    const NodeSpec* quantizer = producer_of(producer, node.inputs[0]);
    if (quantizer && quantizer->type == "Concat") {
      // A channel-conditional model: its slices' quantizers, and the Concat of their decoded values.
      y = {{"type", "channel_groups"}, {"conditional", node.name}, {"groups", nlohmann::json::array()}};
      std::vector<std::string> rounded;
      for (std::size_t k = 0; k < quantizer->inputs.size(); ++k) {
        const NodeSpec* q = producer_of(producer, quantizer->inputs[k]);
        if (!q || q->type != kMeanQuantizerType || q->inputs.size() != 2 || q->outputs.size() != 2 ||
            q->outputs[0] != quantizer->inputs[k])
          throw NotCodable(spec.source,
                           "its latent '" + node.inputs[0] + "' joins " + std::to_string(quantizer->inputs.size()) +
                               " slices (a channel-conditional model), and slice " + std::to_string(k) + " ('" +
                               quantizer->inputs[k] + "') must be the first output of a " + kMeanQuantizerType +
                               " node reading [y, means] whose second output, the rounded slice, the "
                               "decoder reads");
        y["groups"].push_back({{"quantizer", q->name}});
        rounded.push_back(q->outputs[1]);
      }
      std::string decoded;
      for (const NodeSpec& join : spec.nodes) {
        if (join.type != "Concat" || join.inputs.size() != rounded.size() || join.outputs.size() != 1) continue;
        bool joins_decoded = true;
        for (std::size_t k = 0; k < rounded.size() && joins_decoded; ++k) {
          const NodeSpec* add = producer_of(producer, join.inputs[k]);
          joins_decoded =
              join.inputs[k] == rounded[k] || (add && add->type == "Add" && add->inputs.size() == 2 &&
                                               (add->inputs[0] == rounded[k] || add->inputs[1] == rounded[k]));
        }
        if (joins_decoded) decoded = join.name;
      }
      if (decoded.empty())
        throw NotCodable(spec.source, "its latent '" + node.inputs[0] + "' joins " + std::to_string(rounded.size()) +
                                          " slices (a channel-conditional model), and no Concat joins the decoded "
                                          "slices (each its rounded slice, or an Add of it and the latent residual "
                                          "prediction) for the synthesis to read");
      y["decoded"] = decoded;
    } else if (!quantizer || quantizer->type != kMeanQuantizerType || quantizer->inputs.size() != 2 ||
               quantizer->inputs[1] != node.inputs[2]) {
      throw NotCodable(spec.source, "its latent '" + node.inputs[0] + "' must be the output of a " +
                                        kMeanQuantizerType + " node reading [y, '" + node.inputs[2] +
                                        "'] (the means of " + kGaussianType + " '" + node.name +
                                        "'), so that the codec can quantise around the integer means");
    } else {
      y = {{"type", "gaussian"},
           {"conditional", node.name},
           {"distribution", "mean_scale"},
           {"quantizer", quantizer->name}};
    }
  }
  return {{"type", "hyperprior"}, {"z", factorized}, {"y", y}};
}

// ---- The section against the graph ----

class SectionCut {
 public:
  SectionCut(const ModelSpec& spec, CodecGraph& graph) : spec_(spec), graph_(graph), producer_(producers(spec)) {}

  void cut(const LatentCodec& root) {
    if (root.type == "factorized") {
      factorized(root);
      graph_.latent = graph_.factorized_latent;
      graph_.analysed = {graph_.latent};
      graph_.kind = ModelKind::factorized;
    } else if (root.type == "hyperprior") {
      const LatentCodec& z = root.children[0];
      const LatentCodec& y = root.children[1];
      if (z.type != "factorized")
        refuse(z.where + " is a '" + z.type + "' latent codec; a hyperprior's hyper-latent is coded 'factorized'");
      factorized(z);
      graph_.hyper_latent = graph_.factorized_latent;
      graph_.parameter_blobs.hyper_latent = graph_.hyper_latent;
      if (y.type == "gaussian") gaussian(y);
      else if (y.type == "channel_groups") channel_groups(y);
      else if (y.type == "checkerboard") checkerboard(y);
      else if (y.type == "autoregressive") autoregressive(y);
      else
        refuse(y.where + " is a '" + y.type +
               "' latent codec; a hyperprior's latent is coded 'gaussian', 'channel_groups', 'checkerboard' or "
               "'autoregressive'");
      if (graph_.latent == graph_.hyper_latent)
        refuse(y.where + " codes '" + graph_.latent + "', the hyper-latent " + z.where + " codes");
    } else {
      refuse(root.where + " is a '" + root.type +
             "' latent codec; the codec codes a 'factorized' or a 'hyperprior' tree (a gaussian latent needs the "
             "hyperprior that gives its parameters)");
    }
    covered({kEntropyModelType, kGaussianType});
  }

 private:
  [[noreturn]] void refuse(const std::string& reason) const { throw NotCodable(spec_.source, reason); }

  const NodeSpec& node(const std::string& name, const char* type, const std::string& where) {
    const NodeSpec* found = spec_.node_named(name);
    if (!found) refuse(where + " names '" + name + "', which is not a node of the spec");
    if (found->type != type) refuse(where + " names node '" + name + "', a " + found->type + "; it must be a " + type);
    named_.insert(name);
    return *found;
  }

  void factorized(const LatentCodec& codec) {
    const NodeSpec& entropy = node(codec.entropy_model, kEntropyModelType, codec.where + "/entropy_model");
    if (entropy.inputs.size() != 1)
      refuse("its " + std::string(kEntropyModelType) + " node '" + entropy.name + "' (" + codec.where +
             "/entropy_model) has " + std::to_string(entropy.inputs.size()) + " inputs; it reads the latent it codes");
    graph_.entropy_node = entropy.name;
    graph_.factorized_latent = entropy.inputs[0];
  }

  void gaussian(const LatentCodec& codec) {
    if (codec.distribution == "mixture")
      refuse(codec.where + " declares a " + std::to_string(codec.components) +
             "-component Gaussian mixture, which this plexus-ae cannot code yet (a scale or mean_scale "
             "distribution can be coded)");
    const NodeSpec& conditional = node(codec.conditional, kGaussianType, codec.where + "/conditional");
    const bool means = codec.distribution == "mean_scale";
    if (conditional.inputs.size() != (means ? 3u : 2u))
      refuse("its " + std::string(kGaussianType) + " node '" + conditional.name + "' has " +
             std::to_string(conditional.inputs.size()) + " inputs, but " + codec.where + " declares a " +
             codec.distribution + " distribution, which reads " +
             (means ? "[latent, scales, means]" : "[latent, scales]"));
    graph_.kind = means ? ModelKind::mean_scale_hyperprior : ModelKind::hyperprior;
    graph_.gaussian_node = conditional.name;
    graph_.latent = conditional.inputs[0];
    graph_.parameter_blobs.scales = conditional.inputs[1];
    graph_.analysed = {graph_.latent};
    if (!means) return;
    graph_.parameter_blobs.means = conditional.inputs[2];
    const NodeSpec& quantizer = node(codec.quantizer, kMeanQuantizerType, codec.where + "/quantizer");
    if (quantizer.inputs.size() != 2 || quantizer.inputs[1] != conditional.inputs[2] || quantizer.outputs.empty() ||
        quantizer.outputs[0] != graph_.latent)
      refuse("its latent '" + graph_.latent + "' must be the output of " + kMeanQuantizerType + " '" + quantizer.name +
             "' (" + codec.where + "/quantizer) reading [y, '" + conditional.inputs[2] + "'] (the means of " +
             kGaussianType + " '" + conditional.name + "'), so that the codec can quantise around the integer means");
    graph_.analysed = {quantizer.inputs[0]};
    if (quantizer.outputs.size() == 2) graph_.synthesis_input = quantizer.outputs[1];
  }

  // The channel-conditional structure: the conditional reads [y_hat, scales,
  // means], y_hat a Concat of the groups' first quantizer outputs, means a
  // Concat of their means, scales a Concat of as many blobs; group k's scales
  // and means read no group >= k; the decoded Concat joins, group by group,
  // the rounded group or an Add of it and another value.
  void channel_groups(const LatentCodec& codec) {
    const NodeSpec& conditional = node(codec.conditional, kGaussianType, codec.where + "/conditional");
    const std::size_t groups = codec.groups.size();
    auto refuse_groups = [&](const std::string& reason) {
      refuse(codec.where + " codes '" + (conditional.inputs.empty() ? std::string() : conditional.inputs[0]) + "' in " +
             std::to_string(groups) + " channel groups, and " + reason);
    };
    if (conditional.inputs.size() != 3)
      refuse_groups("its " + std::string(kGaussianType) + " node '" + conditional.name + "' has " +
                    std::to_string(conditional.inputs.size()) + " inputs, not [latent, scales, means]");
    graph_.kind = ModelKind::channel_conditional;
    graph_.gaussian_node = conditional.name;
    graph_.latent = conditional.inputs[0];
    graph_.parameter_blobs.scales = conditional.inputs[1];
    graph_.parameter_blobs.means = conditional.inputs[2];
    std::vector<std::string> firsts, means;
    for (std::size_t k = 0; k < groups; ++k) {
      const std::string where = codec.where + "/groups/" + std::to_string(k) + "/quantizer";
      const NodeSpec& q = node(codec.groups[k], kMeanQuantizerType, where);
      if (q.inputs.size() != 2 || q.outputs.size() != 2)
        refuse_groups("group " + std::to_string(k) + "'s " + kMeanQuantizerType + " '" + q.name + "' (" + where +
                      ") must read [y, means] and give the quantised group and the rounded group the decoder reads");
      graph_.analysed.push_back(q.inputs[0]);
      means.push_back(q.inputs[1]);
      firsts.push_back(q.outputs[0]);
      graph_.parameter_blobs.rounded.push_back(q.outputs[1]);
    }
    const NodeSpec* joined = producer_of(producer_, graph_.latent);
    if (!joined || joined->type != "Concat" || joined->inputs != firsts)
      refuse_groups("'" + graph_.latent + "' must be a Concat of the groups' quantised values, in group order");
    const NodeSpec* means_join = producer_of(producer_, conditional.inputs[2]);
    if (!means_join || means_join->type != "Concat" || means_join->inputs != means)
      refuse_groups("the means '" + conditional.inputs[2] + "' must be a Concat of the groups' means, in group order");
    const NodeSpec* scales_join = producer_of(producer_, conditional.inputs[1]);
    if (!scales_join || scales_join->type != "Concat" || scales_join->inputs.size() != groups)
      refuse_groups("the scales '" + conditional.inputs[1] + "' must be a Concat of " + std::to_string(groups) +
                    " blobs, group by group");
    std::map<std::string, int> seen;
    for (std::size_t k = 0; k < groups; ++k)
      for (const std::string& blob : {scales_join->inputs[k], means[k]}) {
        const int latest = latest_slice(producer_, graph_.parameter_blobs.rounded, blob, seen);
        if (latest >= static_cast<int>(k))
          refuse_groups("slice " + std::to_string(k) + "'s '" + blob + "' reads slice " + std::to_string(latest) +
                        ", which the decoder has not decoded yet (slice k's scales and means may read only slices "
                        "before k)");
      }
    if (!codec.group_checkerboards.empty()) group_checkerboards(codec, scales_join->inputs, means);
    const NodeSpec* decoded = spec_.node_named(codec.decoded);
    if (!decoded) refuse(codec.where + "/decoded names '" + codec.decoded + "', which is not a node of the spec");
    bool joins_decoded = decoded->type == "Concat" && decoded->inputs.size() == groups && decoded->outputs.size() == 1;
    for (std::size_t k = 0; k < groups && joins_decoded; ++k) {
      const std::string& rounded = graph_.parameter_blobs.rounded[k];
      const NodeSpec* add = producer_of(producer_, decoded->inputs[k]);
      joins_decoded = decoded->inputs[k] == rounded || (add && add->type == "Add" && add->inputs.size() == 2 &&
                                                        (add->inputs[0] == rounded || add->inputs[1] == rounded));
    }
    if (!joins_decoded)
      refuse_groups("its decoded latent, node '" + decoded->name + "' (" + codec.where +
                    "/decoded), must be a Concat joining, group by group, the rounded group or an Add of it and "
                    "another value (the latent residual prediction)");
    graph_.synthesis_input = decoded->outputs[0];
    graph_.parameter_blobs.decoded = graph_.synthesis_input;
  }

  // Channel groups coded as checkerboards (codec_graph.h): group k's context
  // input a UniformNoise of its y, its anchor mask ("even") reading it, its
  // context mask ("odd"); group k's scales and means read its context input
  // only through its context mask, whose input reads it only through its
  // anchor mask, and read no later group's context input.
  void group_checkerboards(const LatentCodec& codec, const std::vector<std::string>& scales,
                           const std::vector<std::string>& means) {
    graph_.kind = ModelKind::grouped_checkerboard;
    std::vector<std::string> rounded;
    for (std::size_t k = 0; k < codec.groups.size(); ++k) {
      const std::string where = codec.where + "/groups/" + std::to_string(k);
      const NodeSpec& input =
          node(codec.group_checkerboards[k].context_input, kContextInputType, where + "/context_input");
      if (input.inputs != std::vector<std::string>{graph_.analysed[k]} || input.outputs.size() != 1)
        refuse("node '" + input.name + "' (" + where + "/context_input) must read group " + std::to_string(k) +
               "'s latent '" + graph_.analysed[k] + "' that its quantizer '" + codec.groups[k] +
               "' quantises, and give the rounded group the context reads");
      rounded.push_back(input.outputs[0]);
    }
    for (std::size_t k = 0; k < codec.groups.size(); ++k) {
      const std::string where = codec.where + "/groups/" + std::to_string(k);
      const LatentCodec::GroupCheckerboard& keys = codec.group_checkerboards[k];
      const NodeSpec& anchors = mask(keys.anchor_mask, "even", where + "/anchor_mask");
      if (anchors.inputs[0] != rounded[k])
        refuse("node '" + anchors.name + "' (" + where + "/anchor_mask) must read '" + rounded[k] +
               "', the output of group " + std::to_string(k) + "'s context input '" + keys.context_input + "'");
      const NodeSpec& context = mask(keys.context_mask, "odd", where + "/context_mask");
      for (const std::string& blob : {scales[k], means[k]}) {
        if (reads(blob, rounded[k], context.outputs[0]))
          refuse("group " + std::to_string(k) + "'s '" + blob + "' reads its rounded latent '" + rounded[k] +
                 "' other than through node '" + context.name + "' (" + where +
                 "/context_mask), so its parameters would read latent values not yet decoded");
        for (std::size_t later = k + 1; later < rounded.size(); ++later)
          if (reads(blob, rounded[later], ""))
            refuse("group " + std::to_string(k) + "'s '" + blob + "' reads group " + std::to_string(later) +
                   "'s rounded latent '" + rounded[later] +
                   "', which the decoder has not decoded yet (group k's parameters may read only groups before k "
                   "and its own anchors)");
      }
      if (!reads(context.inputs[0], rounded[k], "") || reads(context.inputs[0], rounded[k], anchors.outputs[0]))
        refuse("node '" + context.name + "' (" + where + "/context_mask) must read the context computed from '" +
               rounded[k] + "' through node '" + anchors.name + "' (" + where +
               "/anchor_mask) alone, so that the other positions' parameters read only decoded anchors");
    }
    graph_.parameter_blobs.context_inputs = rounded;
  }

  // What a checkerboard and an autoregressive latent codec share (codec_graph.h): a mean-scale
  // conditional and its quantizer, and the context input, a UniformNoise of the quantizer's y; the
  // graph's kind, latent, parameter blobs and analysed blob set; returns the rounded latent the
  // context reads. `what` names the codec in the errors ("a checkerboard").
  std::string mean_scale_context_input(const LatentCodec& codec, ModelKind kind, const std::string& what) {
    const NodeSpec& conditional = node(codec.conditional, kGaussianType, codec.where + "/conditional");
    if (conditional.inputs.size() != 3)
      refuse("its " + std::string(kGaussianType) + " node '" + conditional.name + "' (" + codec.where +
             "/conditional) has " + std::to_string(conditional.inputs.size()) + " inputs; " + what +
             " latent codec reads [latent, scales, means]");
    graph_.kind = kind;
    graph_.gaussian_node = conditional.name;
    graph_.latent = conditional.inputs[0];
    graph_.parameter_blobs.scales = conditional.inputs[1];
    graph_.parameter_blobs.means = conditional.inputs[2];
    const NodeSpec& quantizer = node(codec.quantizer, kMeanQuantizerType, codec.where + "/quantizer");
    if (quantizer.inputs.size() != 2 || quantizer.inputs[1] != conditional.inputs[2] || quantizer.outputs.empty() ||
        quantizer.outputs[0] != graph_.latent)
      refuse("its latent '" + graph_.latent + "' must be the output of " + kMeanQuantizerType + " '" + quantizer.name +
             "' (" + codec.where + "/quantizer) reading [y, '" + conditional.inputs[2] + "'] (the means of " +
             kGaussianType + " '" + conditional.name + "'), so that the codec can quantise around the integer means");
    graph_.analysed = {quantizer.inputs[0]};
    if (quantizer.outputs.size() == 2) graph_.synthesis_input = quantizer.outputs[1];
    const NodeSpec& input = node(codec.context_input, kContextInputType, codec.where + "/context_input");
    if (input.inputs != std::vector<std::string>{quantizer.inputs[0]} || input.outputs.size() != 1)
      refuse("node '" + input.name + "' (" + codec.where + "/context_input) must read the latent '" +
             quantizer.inputs[0] + "' that " + kMeanQuantizerType + " '" + quantizer.name +
             "' quantises, and give the rounded latent the context reads");
    return input.outputs[0];
  }

  // The checkerboard structure (codec_graph.h): a mean-scale conditional and
  // quantizer; the context input a UniformNoise of the quantizer's y; the
  // anchor mask ("even") reading it; the context mask ("odd"); the scales and
  // means reading the context input only through the context mask, and the
  // context mask's input only through the anchor mask.
  void checkerboard(const LatentCodec& codec) {
    const std::string rounded = mean_scale_context_input(codec, ModelKind::checkerboard, "a checkerboard");
    const NodeSpec& anchors = mask(codec.anchor_mask, "even", codec.where + "/anchor_mask");
    if (anchors.inputs[0] != rounded)
      refuse("node '" + anchors.name + "' (" + codec.where + "/anchor_mask) must read '" + rounded +
             "', the output of the context input '" + codec.context_input + "'");
    const NodeSpec& context = mask(codec.context_mask, "odd", codec.where + "/context_mask");
    for (const std::string& blob : {graph_.parameter_blobs.scales, graph_.parameter_blobs.means})
      if (reads(blob, rounded, context.outputs[0]))
        refuse("'" + blob + "' reads the rounded latent '" + rounded + "' other than through node '" + context.name +
               "' (" + codec.where + "/context_mask), so the parameters would read latent values not yet decoded");
    if (!reads(context.inputs[0], rounded, "") || reads(context.inputs[0], rounded, anchors.outputs[0]))
      refuse("node '" + context.name + "' (" + codec.where + "/context_mask) must read the context computed from '" +
             rounded + "' through node '" + anchors.name + "' (" + codec.where +
             "/anchor_mask) alone, so that the other positions' parameters read only decoded anchors");
    graph_.parameter_blobs.rounded = {rounded};
    graph_.parameter_blobs.decoded = rounded;
  }

  // The autoregressive structure (codec_graph.h): a mean-scale conditional
  // and quantizer; the context input a UniformNoise of the quantizer's y;
  // the context a Conv2d with mask "A" (stride 1, padding kernel / 2, groups
  // and dilation 1) reading it; the scales and means reading it only through
  // the context, so each position's parameters read only positions before it.
  void autoregressive(const LatentCodec& codec) {
    const std::string rounded = mean_scale_context_input(codec, ModelKind::autoregressive, "an autoregressive");
    const NodeSpec& context = node(codec.context, kMaskedConvolutionType, codec.where + "/context");
    const std::int64_t kernel = context.params.value("kernel", std::int64_t(0));
    if (context.params.value("mask", std::string("none")) != "A" || context.params.value("stride", 1) != 1 ||
        context.params.value("groups", 1) != 1 || context.params.value("dilation", 1) != 1 || kernel % 2 != 1 ||
        context.params.value("padding", std::int64_t(0)) != kernel / 2 || context.outputs.size() != 1)
      refuse("node '" + context.name + "' (" + codec.where +
             "/context) must be a Conv2d with \"mask\": \"A\", an odd kernel, stride 1, padding kernel / 2 and "
             "groups and dilation 1, so that each position's context reads only the positions before it");
    if (context.inputs != std::vector<std::string>{rounded})
      refuse("node '" + context.name + "' (" + codec.where + "/context) must read '" + rounded +
             "', the output of the context input '" + codec.context_input + "'");
    for (const std::string& blob : {graph_.parameter_blobs.scales, graph_.parameter_blobs.means})
      if (reads(blob, rounded, context.outputs[0]))
        refuse("'" + blob + "' reads the rounded latent '" + rounded + "' other than through node '" + context.name +
               "' (" + codec.where + "/context), so the parameters would read latent values not yet decoded");
    graph_.parameter_blobs.rounded = {rounded};
    graph_.parameter_blobs.decoded = rounded;
  }

  // A CheckerboardMask node of one input and output keeping `keep` positions.
  const NodeSpec& mask(const std::string& name, const char* keep, const std::string& where) {
    const NodeSpec& found = node(name, kCheckerboardMaskType, where);
    if (found.inputs.size() != 1 || found.outputs.size() != 1 || found.params.value("keep", std::string()) != keep)
      refuse("node '" + name + "' (" + where + ") must keep the \"" + keep + "\" positions of one input");
    return found;
  }

  // Whether `blob` is computed from `source` along a path that does not pass `cut`.
  bool reads(const std::string& blob, const std::string& source, const std::string& cut) const {
    std::set<std::string> seen;
    std::vector<std::string> pending{blob};
    while (!pending.empty()) {
      const std::string at = pending.back();
      pending.pop_back();
      if (at == source) return true;
      if (at == cut || !seen.insert(at).second) continue;
      if (const NodeSpec* n = producer_of(producer_, at))
        pending.insert(pending.end(), n->inputs.begin(), n->inputs.end());
    }
    return false;
  }

  // Every node of `types` in the spec is one the section names: a latent the
  // section leaves out would be trained but never coded.
  void covered(const std::vector<const char*>& types) const {
    for (const NodeSpec& n : spec_.nodes)
      for (const char* type : types)
        if (n.type == type && !named_.count(n.name))
          refuse("its " + std::string(type) + " node '" + n.name +
                 "' is not in the codec section, which would leave its latent uncoded");
  }

  const ModelSpec& spec_;
  CodecGraph& graph_;
  std::map<std::string, const NodeSpec*> producer_;
  std::set<std::string> named_;
};

}  // namespace

nlohmann::json codec_section(const ModelSpec& spec) { return spec.codec.is_null() ? infer_section(spec) : spec.codec; }

LatentCodec parse_codec_section(const nlohmann::json& section, const std::string& source) {
  return parse_latent_codec(section, source, "/codec");
}

std::uint64_t codec_fingerprint(const nlohmann::json& section) {
  plexus::Fnv1a64 hash;
  hash.add_field("plexus-ae codec section");
  hash.add_field(section.dump());
  return hash.value();
}

CodecGraph split_for_coding(const ModelSpec& spec) {
  CodecGraph graph;
  graph.section = codec_section(spec);
  graph.section_fingerprint = codec_fingerprint(graph.section);
  SectionCut(spec, graph).cut(parse_codec_section(graph.section, spec.source));
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
  graph.density.nodes = {*spec.node_named(graph.entropy_node)};
  return graph;
}

HyperpriorGeometry probe_hyperprior_geometry(const CodecGraph& graph, const ModelSpec& spec, const Registry& registry) {
  constexpr std::int64_t kProbeSide = 256;
  const Net probe(graph.analysis, registry, model_input_shapes(graph.analysis, Shape{1, 3, kProbeSide, kProbeSide}),
                  DType::f32, Device::cpu(), 0, InitialParameters::shapes_only);
  const Shape& z = probe.blob_shape(graph.hyper_latent);
  const Shape& y = probe.blob_shape(graph.analysed[0]);
  if (z.size() != 4 || y.size() != 4 || z[2] < 1 || z[3] != z[2] || y[3] != y[2] || kProbeSide % z[2] != 0 ||
      y[2] % z[2] != 0)
    throw NotCodable(spec.source, "a " + std::to_string(kProbeSide) + "-pixel square image gives a latent '" +
                                      graph.latent + "' of " + shape_str(y) + " and a hyper-latent '" +
                                      graph.hyper_latent + "' of " + shape_str(z) +
                                      "; the hyper-latent's side must divide both the image's and the latent's");
  HyperpriorGeometry geometry{static_cast<int>(kProbeSide / z[2]), static_cast<int>(y[2] / z[2]), {}};
  for (const std::string& blob : graph.analysed) {
    const Shape& slice = probe.blob_shape(blob);
    if (slice.size() != 4 || slice[2] != y[2] || slice[3] != y[3])
      throw NotCodable(spec.source, "its latent slices differ in size ('" + blob + "' is " + shape_str(slice) + ", '" +
                                        graph.analysed[0] + "' " + shape_str(y) + ")");
    geometry.analysed_channels.push_back(static_cast<std::int32_t>(slice[1]));
  }
  return geometry;
}

}  // namespace plexus::codec

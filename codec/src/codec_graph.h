#pragma once
// The cut of a plexus-ae model at its latent that CodecModel runs
// (codec_model.h): which nodes analyse the image, which synthesise it, which
// give the factorized entropy model's density, and for a hyperprior where its
// entropy parameters come from. Found from the spec's "codec" section, the
// tree of latent codecs that names those nodes (docs/writing-models.md), or
// for a spec without one from the section inferred for the four kinds that
// came before sections. Judged from the spec alone; NotCodable names what
// the codec cannot code.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hyperprior_coding.h"
#include "plexus/codec/bitstream.h"
#include "plexus/error.h"
#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus::codec {

inline constexpr const char* kEntropyModelType = "FactorizedEntropyModel";
inline constexpr const char* kGaussianType = "GaussianConditional";
inline constexpr const char* kMeanQuantizerType = "QuantizeAroundMean";
inline constexpr const char* kContextInputType = "UniformNoise";
inline constexpr const char* kCheckerboardMaskType = "CheckerboardMask";
inline constexpr const char* kMaskedConvolutionType = "Conv2d";  // with "mask": "A", an autoregressive context

// One latent codec of a "codec" section, checked for its keys (not yet
// against the graph). The tree's types and what each names:
//   factorized      entropy_model: a FactorizedEntropyModel node, whose input is the coded latent
//   gaussian        conditional: a GaussianConditional node; distribution: "scale" (it reads
//                   [latent, scales]), "mean_scale" (reads [latent, scales, means], and quantizer:
//                   the QuantizeAroundMean node reading [y, means] that gives the latent) or
//                   "mixture" (components: K; declared, not yet codable)
//   hyperprior      z: a factorized codec of the hyper-latent; y: a gaussian, channel_groups or
//                   checkerboard codec whose parameters the integer network computes from z
//   channel_groups  conditional: as gaussian's; groups: [{"quantizer": a QuantizeAroundMean node}, ...]
//                   in coding order, each group's parameters computed from z and the groups before it;
//                   decoded: the Concat node giving the decoded latent the synthesis reads. A group may
//                   also hold a checkerboard's context_input, anchor_mask and context_mask (every group
//                   or none): each group is then coded as a checkerboard, its anchors from z and the
//                   groups before it, its other positions also from its decoded anchors (ELIC)
//   checkerboard    conditional, quantizer: as a mean_scale gaussian's; context_input: the UniformNoise
//                   node reading the quantizer's y, whose output (the rounded latent) the context reads;
//                   anchor_mask: the CheckerboardMask keeping "even" positions (the anchors) of it;
//                   context_mask: the CheckerboardMask keeping "odd" positions of the context network's
//                   output. The anchors are coded first, their parameters from z alone; then the others,
//                   from z and the decoded anchors
//   autoregressive  conditional, quantizer and context_input as checkerboard's; context: the Conv2d
//                   with mask "A" (stride 1, padding kernel / 2) reading the rounded latent, the only
//                   way the scales and means read it. Coded position by position (autoregressive_coding.h)
struct LatentCodec {
  std::string type;
  std::string where;  // its path in the spec, "/codec/y", for messages
  std::string entropy_model;
  std::string conditional;
  std::string distribution;
  int components = 1;
  std::string quantizer;
  std::vector<std::string> groups;
  std::string decoded;
  std::string context_input, anchor_mask, context_mask;
  // channel_groups of checkerboard-coded groups: each group's context_input, anchor_mask, context_mask
  // (empty for groups coded whole).
  struct GroupCheckerboard {
    std::string context_input, anchor_mask, context_mask;
  };
  std::vector<GroupCheckerboard> group_checkerboards;
  std::string context;                // autoregressive
  std::vector<LatentCodec> children;  // hyperprior: z, y
};

// The spec's "codec" section, or for a spec without one the section of its
// kind, inferred from its FactorizedEntropyModel, GaussianConditional and
// QuantizeAroundMean nodes (NotCodable when none fits).
nlohmann::json codec_section(const ModelSpec& spec);
// NotCodable naming the path and key of a malformed section.
LatentCodec parse_codec_section(const nlohmann::json& section, const std::string& source);
// FNV-1a 64 over the section's compact JSON (keys sorted): the codec tree a
// version-5 file names.
std::uint64_t codec_fingerprint(const nlohmann::json& section);

// The model's graph cut at the latent: three sub-specs that run the parts
// of the model a codec needs, with the parameter names of the whole.
struct CodecGraph {
  ModelKind kind = ModelKind::factorized;
  std::string latent;   // the coded latent, y_hat
  ModelSpec analysis;   // "image" -> latent (and the hyper-latent)
  ModelSpec synthesis;  // latent -> "x_hat"
  ModelSpec density;    // factorized_latent -> the entropy model's likelihoods
  std::string entropy_node;
  std::string factorized_latent;  // what the FactorizedEntropyModel reads: latent, or the hyper-latent
  // Hyperprior kinds only: z_hat, the GaussianConditional, and where its
  // entropy parameters (scales, means) come from.
  std::string hyper_latent;
  std::string gaussian_node;
  EntropyParameterBlobs parameter_blobs;
  // What the analysis gives for the latent, in channel order: y_hat; y,
  // which a mean-scale model's QuantizeAroundMean rounds; or a
  // channel-conditional model's slices y_k, each rounded by its own.
  std::vector<std::string> analysed;
  // What the synthesis reads: the latent, the rounded second output of a
  // QuantizeAroundMean with "synthesis": "straight_through" (in eval mode the
  // same values), or a channel-conditional model's decoded latent (the
  // integer network's `decoded`).
  std::string synthesis_input;
  // The codec section it was cut by, and its fingerprint.
  nlohmann::json section;
  std::uint64_t section_fingerprint = 0;
};

// A spec the codec cannot code: what() is "<source> cannot be used as a
// codec: <reason>", and why_not_codable() returns the reason.
class NotCodable : public ConfigError {
 public:
  NotCodable(const std::string& source, const std::string& reason)
      : ConfigError(source + " cannot be used as a codec: " + reason), reason_(reason) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// The cut by codec_section(spec). Throws NotCodable when the section names
// a node the spec lacks or of the wrong type or wiring (naming the node and
// the section's key), when a FactorizedEntropyModel or GaussianConditional of
// the spec is not in the section, when the tree is not one the codec can code
// yet, or when the reconstruction needs more than the latent. Without a
// section, a spec must have one FactorizedEntropyModel and at most one
// GaussianConditional.
//
// A channel-conditional model: the GaussianConditional reads [y_hat,
// scales, means] with y_hat a Concat of slices, slice k the first output of
// a QuantizeAroundMean reading [y_k, mean_k] whose second output is the
// rounded slice; means a Concat of the mean_k, scales a Concat of as many
// scale blobs, slice k's scales and means computed without slice k or a
// later one; the synthesis reads a Concat of the slices' decoded values,
// each the rounded slice or an Add of it and another value (the latent
// residual prediction).
//
// A checkerboard model: as a mean-scale one, and the scales and means read
// the context input (the decoder's decoded anchors) only through the context
// mask, whose input reads it only through the anchor mask.
//
// An autoregressive model: as a mean-scale one, and the scales and means read
// the context input (the decoded latent) only through the context, a Conv2d
// with mask "A", stride 1, padding kernel / 2, groups and dilation 1.
CodecGraph split_for_coding(const ModelSpec& spec);

// A hyperprior pads to the hyper-latent's stride, 256 / Z for a 256-pixel
// square that gives a Z x Z hyper-latent, with Y / Z latent positions per
// hyper-latent position (Y x Y the latent). Found by shape inference on the
// analysis alone; NotCodable when the sides do not divide. Also the channels
// of each analysed blob (a channel-conditional model's slices).
struct HyperpriorGeometry {
  int stride = 0;
  int latent_per_stride = 1;
  std::vector<std::int32_t> analysed_channels;
};
HyperpriorGeometry probe_hyperprior_geometry(const CodecGraph& graph, const ModelSpec& spec, const Registry& registry);

}  // namespace plexus::codec

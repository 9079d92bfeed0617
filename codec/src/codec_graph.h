#pragma once
// The cut of a plexus-ae model at its latent that CodecModel runs
// (codec_model.h): which nodes analyse the image, which synthesise it, which
// give the factorized entropy model's density, and for a hyperprior where its
// entropy parameters come from. Judged from the spec alone; NotCodable names
// what the codec cannot code.
#include <string>
#include <vector>

#include "hyperprior_coding.h"
#include "plexus/codec/bitstream.h"
#include "plexus/error.h"
#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus::ae {

inline constexpr const char* kEntropyModelType = "FactorizedEntropyModel";
inline constexpr const char* kGaussianType = "GaussianConditional";
inline constexpr const char* kMeanQuantizerType = "QuantizeAroundMean";

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

// Throws NotCodable when `spec` has no single FactorizedEntropyModel, more
// than one GaussianConditional, a latent the codec cannot quantise, or a
// reconstruction that needs more than the latent.
//
// A channel-conditional model: the GaussianConditional reads [y_hat,
// scales, means] with y_hat a Concat of slices, slice k the first output of
// a QuantizeAroundMean reading [y_k, mean_k] whose second output is the
// rounded slice; means a Concat of the mean_k, scales a Concat of as many
// scale blobs, slice k's scales and means computed without slice k or a
// later one; the synthesis reads a Concat of the slices' decoded values,
// each the rounded slice or an Add of it and another value (the latent
// residual prediction).
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

}  // namespace plexus::ae

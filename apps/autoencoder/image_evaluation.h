#pragma once
// One image through a model in eval mode (rounded latent): padded by edge
// replication to a multiple of the model's stride, run, cropped back; a
// model whose context reads its own decoded latent, run in the codec's order.
#include <map>
#include <string>
#include <vector>

#include "plexus/context.h"
#include "plexus/data/image.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus::ae {

struct ImageEvaluation {
  double psnr = 0;     // dB, of the 8-bit reconstruction (what the PNG holds)
  double ms_ssim = 0;  // of the 8-bit reconstruction (ms_ssim_of_images); NaN for an image too small
  double bpp = 0;      // the entropy model's estimate for the rounded latent, per original pixel
  double mse = 0;      // on [0, 1] values, of the 8-bit reconstruction
  data::Image reconstruction;
};

// MS-SSIM of two images of one size, on their [0, 1] values (v / 255), by
// the MSSSIM layer on the CPU in f64; NaN when a side is under
// kMsSsimMinSide (autoencoder_contract.h), too small for its 5 scales.
double ms_ssim_of_images(const data::Image& a, const data::Image& b);

// A model whose context network reads its own latent: a "checkerboard" or
// "autoregressive" latent codec in its codec section, or channel groups of
// checkerboards. Its graph gives the context round(y) (the context input, a
// UniformNoise node), which no decoder has: the codec's context reads the
// decoded latent round(y - mean) + mean of the positions decoded before,
// and the means, so the symbols and the rate, follow what the context reads
// (fed round(y), an autoregressive model's estimate came out 15% to 75%
// under its files). spec() is the model with each context input made a
// model input, of the latent's shape, which evaluate_image sets to the
// decoded latent: the codec's, the latent of the image's file (one pass);
// or without a codec the float model's own, pass after pass, each context
// input the decoded latent (its quantizer's last output) of the pass before
// (0 in the first), until a pass decodes what it was given or the passes
// reach the longest chain of positions each reading the one before (a
// checkerboard's anchors, then the rest: 2; G + 1 for G checkerboard-coded
// channel groups; one per position for an autoregressive context, whose
// passes do not settle sooner: a rounding that flips moves the means after
// it). Either way every position's parameters come from the latent decoded
// at the positions before it, as in the codec.
class DecodedContexts {
 public:
  // Empty for a model without such a codec (or whose section does not name
  // the nodes as the codec needs them: the codec says why).
  DecodedContexts(const ModelSpec& model, const Registry& registry);
  bool empty() const { return inputs_.empty(); }
  const ModelSpec& spec() const { return spec_; }
  // spec()'s input shapes for a padded image of `image_shape`.
  std::map<std::string, Shape> input_shapes(const Shape& image_shape) const;
  // A context input (now a model input) and the decoded latent it is set to.
  struct Input {
    std::string blob, decoded;
  };
  const std::vector<Input>& inputs() const { return inputs_; }
  // The passes that make every position's parameters the codec's, for a
  // latent of `positions` positions per channel.
  std::int64_t passes_needed(std::int64_t positions) const {
    return autoregressive_ ? positions + 1 : static_cast<std::int64_t>(inputs_.size()) + 1;
  }

 private:
  ModelSpec model_, spec_;
  const Registry* registry_;
  std::vector<Input> inputs_;
  bool autoregressive_ = false;
};

// Reshapes `net` to the padded image. The rate counts every bit of the
// padded latent (a real codec would code them too) over the original
// pixels: bpp = bpp(padded) * (padded pixels) / (original pixels).
// `level`: a variable-rate model's rate level (ignored by a model of one rate).
// `contexts`, when given and not empty: `net` is of contexts->spec(), its
// contexts fed the decoded latent (DecodedContexts): `decoded`, when given,
// the latent the codec decodes from the image's file ([1, C, h, w],
// CodecModel::Latents::latent, the groups' channels in coding order); the
// rate and the reconstruction are then the float model's for that latent.
ImageEvaluation evaluate_image(Net& net, Context& ctx, const data::Image& image, int stride, double level = 0,
                               const DecodedContexts* contexts = nullptr, const Tensor* decoded = nullptr);

}  // namespace plexus::ae

#pragma once
// What plexus-ae expects of a model spec (bundled or the user's own):
//   input   "image"        [N, 3, H, W] in [0, 1]
//   outputs "x_hat"        the reconstruction, same shape as "image"
//           "likelihoods"  the entropy model's likelihoods of the latent
//                          (a hyperprior model also has "z_likelihoods", of
//                          the hyper-latent; "bpp" counts both)
//           "mse"          scalar distortion, mean((x_hat - image)^2)
//           "bpp"          scalar rate in bits per pixel of "image"
// The training loss is lambda * 255^2 * mse + bpp unless the spec's "loss"
// section says otherwise (TrainingLoss below). In eval mode
// (Context::set_training(false)) the quantiser rounds instead of adding noise.
//
// A variable-rate model (one model for several rate-distortion trade-offs,
// through GainUnit nodes: Cui et al. 2021) has two more inputs:
//   "level"      [N]  each image's rate level in [0, K-1], K the "levels" of
//                     its GainUnit nodes; fractional levels interpolate
//   "mse_weight" [N]  each image's weight in "mse", the third input of its
//                     MSELoss: mse = mean over images of weight_n * mse_n
// Training draws a level k for every image and weights it lambda_k /
// mean(lambdas), the loss weight of "mse" being mean(lambdas) * 255^2; eval,
// compress and decompress give every image weight 1, so "mse" is the MSE.
#include <map>
#include <string>
#include <vector>

#include "plexus/context.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus::codec {

inline constexpr const char* kImage = "image";
inline constexpr const char* kReconstruction = "x_hat";
inline constexpr const char* kLikelihoods = "likelihoods";
inline constexpr const char* kDistortion = "mse";
inline constexpr const char* kRate = "bpp";
inline constexpr const char* kRateLevel = "level";
inline constexpr const char* kMseWeight = "mse_weight";
inline constexpr const char* kGainUnitType = "GainUnit";
// The blob (and node) of MS-SSIM(x_hat, image) that training adds for an
// "ms_ssim" distortion term (an MSSSIM layer).
inline constexpr const char* kMsSsim = "ms_ssim";
// The smallest image side MS-SSIM takes: its fifth scale, 16 times smaller,
// must still hold the 11-pixel window ((11 - 1) * 16 + 1; MSSSIM's check).
inline constexpr int kMsSsimMinSide = 161;

// The loss a spec trains with, from its "loss" section:
//   "loss": {"distortion": [{"type": "mse" | "ms_ssim", "weight": w}, ...],
//            "rate": [{"blob": "bpp", "weight": r}, ...],
//            "lambda": l, "lambdas": [l_0, ..., l_K-1]}
//   loss = lambda * sum_k w_k D_k + sum_j r_j R_j,
//   D_mse = 255^2 * mse,  D_ms_ssim = 1 - MS-SSIM(x_hat, image)
// Every key is optional: distortion [{"type": "mse", "weight": 1}], rate
// [{"blob": "bpp", "weight": 1}]; "lambda" and "lambdas" are the defaults of
// --lambda and --lambdas (the command line's win). No section: today's
// lambda * 255^2 * mse + bpp. CompressAI's MS-SSIM models:
//   {"distortion": [{"type": "ms_ssim", "weight": 1}], "lambda": 2.4 to 60.5}
struct DistortionTerm {
  std::string type;  // "mse" or "ms_ssim"
  double weight = 1;
};
struct RateTerm {
  std::string blob;  // a scalar rate blob of the spec, "bpp" usually
  double weight = 1;
};
struct TrainingLoss {
  std::vector<DistortionTerm> distortion;
  std::vector<RateTerm> rate;
  double lambda = 0;            // 0: not in the spec
  std::vector<double> lambdas;  // empty: not in the spec
  // The summed weight of the distortion terms of `type` (0 when it has none).
  double distortion_weight(const std::string& type) const;
};

// The spec's loss, checked: ConfigError naming the spec and the key, value
// or term at fault (unknown keys and types, weights <= 0, a rate blob no
// node produces, an "ms_ssim" node or blob the spec already has).
TrainingLoss training_loss(const ModelSpec& spec);

// The spec a training net is built from: `spec` itself, or with an
// "ms_ssim" distortion an MSSSIM node "ms_ssim" reading "x_hat" and "image".
ModelSpec training_spec(const ModelSpec& spec, const TrainingLoss& loss);

// lambda * 255^2: the weight of "mse" in the loss (the rate's weight is 1).
double distortion_weight(double lambda);
// A variable-rate model's loss lambda: the mean of its levels' lambdas (the
// level k image's "mse_weight" is lambdas[k] / this).
double variable_rate_lambda(const std::vector<double>& lambdas);

// Throws ConfigError naming the spec and every missing input or output, or
// what is wrong with its "loss" section (training_loss).
void check_contract(const ModelSpec& spec);

// K, the rate levels of a variable-rate model (the "levels" of its GainUnit
// nodes, which must agree); 0 for a model of one rate. Throws ConfigError
// naming the spec when "level" is read but no GainUnit says how many levels,
// or when two GainUnit nodes disagree.
int rate_levels(const ModelSpec& spec);

// The shapes of every input of `spec` (a whole model or a part of one) for
// images of `image` [N, 3, H, W]: "image", and "level" and "mse_weight" [N]
// where the spec reads them.
std::map<std::string, Shape> model_input_shapes(const ModelSpec& spec, const Shape& image);
// The same for a part of a model that reads `main` (of `shape` [N, ...]) instead of "image".
std::map<std::string, Shape> model_input_shapes(const ModelSpec& spec, const std::string& main, const Shape& shape);

// Sets a variable-rate net's "level" of every image to `level` and its
// "mse_weight" to 1 (both only where the net has them; nothing for a model of
// one rate).
// On CUDA enqueued on ctx's stream without waiting.
void set_rate_level(Context& ctx, Net& net, double level);
// Per image: `levels` and `mse_weights` (each of the batch's size).
void set_rate_inputs(Context& ctx, Net& net, const std::vector<double>& levels, const std::vector<double>& mse_weights);

// The model's total stride: image sides that are multiples of it come back
// at the same size, and the deepest latent is that many times smaller (16
// for a factorized model, 64 for a hyperprior, whose hyper-latent is 4x
// smaller than "likelihoods"). Derived by shape inference (image side /
// smallest side of any [N, C, h, w] blob), then verified on a second size;
// throws ConfigError when the spec has no consistent stride.
int derive_stride(const ModelSpec& spec, const Registry& registry);

}  // namespace plexus::codec

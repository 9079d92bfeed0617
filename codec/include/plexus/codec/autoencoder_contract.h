#pragma once
// What plexus-ae expects of a model spec (bundled or the user's own):
//   input   "image"        [N, 3, H, W] in [0, 1]
//   outputs "x_hat"        the reconstruction, same shape as "image"
//           "likelihoods"  the entropy model's likelihoods of the latent
//                          (a hyperprior model also has "z_likelihoods", of
//                          the hyper-latent; "bpp" counts both)
//           "mse"          scalar distortion, mean((x_hat - image)^2)
//           "bpp"          scalar rate in bits per pixel of "image"
// The training loss is lambda * 255^2 * mse + bpp. In eval mode
// (Context::set_training(false)) the quantiser rounds instead of adding noise.
#include <string>

#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus::ae {

inline constexpr const char* kImage = "image";
inline constexpr const char* kReconstruction = "x_hat";
inline constexpr const char* kLikelihoods = "likelihoods";
inline constexpr const char* kDistortion = "mse";
inline constexpr const char* kRate = "bpp";

// lambda * 255^2: the weight of "mse" in the loss (the rate's weight is 1).
double distortion_weight(double lambda);

// Throws ConfigError naming the spec and every missing input or output.
void check_contract(const ModelSpec& spec);

// The model's total stride: image sides that are multiples of it come back
// at the same size, and the deepest latent is that many times smaller (16
// for a factorized model, 64 for a hyperprior, whose hyper-latent is 4x
// smaller than "likelihoods"). Derived by shape inference (image side /
// smallest side of any [N, C, h, w] blob), then verified on a second size;
// throws ConfigError when the spec has no consistent stride.
int derive_stride(const ModelSpec& spec, const Registry& registry);

}  // namespace plexus::ae

#pragma once
// One image through a model in eval mode (rounded latent): padded by edge
// replication to a multiple of the model's stride, run, cropped back.
#include <string>

#include "plexus/context.h"
#include "plexus/data/image.h"
#include "plexus/net.h"

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

// Reshapes `net` to the padded image. The rate counts every bit of the
// padded latent (a real codec would code them too) over the original
// pixels: bpp = bpp(padded) * (padded pixels) / (original pixels).
// `level`: a variable-rate model's rate level (ignored by a model of one rate).
ImageEvaluation evaluate_image(Net& net, Context& ctx, const data::Image& image, int stride, double level = 0);

}  // namespace plexus::ae

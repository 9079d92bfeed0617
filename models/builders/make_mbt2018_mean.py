#!/usr/bin/env python3
"""Writes models/specs/mbt2018-mean.json: the mean-scale hyperprior of Minnen, Balle, Toderici,
"Joint autoregressive and hierarchical priors for learned image compression" (NeurIPS 2018)
without the context model, as CompressAI's mbt2018-mean (N = 128, M = 192); with --checkerboard,
models/specs/checkerboard-mean-scale.json: the same with the checkerboard context model of He et al.,
"Checkerboard Context Model for Efficient Learned Image Compression" (CVPR 2021); with --autoregressive,
models/specs/mbt2018.json: the paper's joint autoregressive and hierarchical prior itself (N = M = 192, as
CompressAI's mbt2018 at its lower qualities), the context a 5x5 convolution with the raster-scan mask "A".

usage: models/builders/make_mbt2018_mean.py > models/specs/mbt2018-mean.json
       models/builders/make_mbt2018_mean.py --checkerboard > models/specs/checkerboard-mean-scale.json
       models/builders/make_mbt2018_mean.py --autoregressive > models/specs/mbt2018.json
"""
import sys

from balle_transforms import AUTOREGRESSIVE_CODEC, CHECKERBOARD_CODEC, analysis, autoregressive_context, \
    checkerboard_context, four_stages, losses, mean_scale_hyperprior, synthesis
from spec_builder import SpecBuilder

M = 192
checkerboard = sys.argv[1:] == ["--checkerboard"]
autoregressive = sys.argv[1:] == ["--autoregressive"]
if sys.argv[1:] not in ([], ["--checkerboard"], ["--autoregressive"]):
    sys.exit("usage: make_mbt2018_mean.py [--checkerboard | --autoregressive]")
N = 192 if autoregressive else 128
spec = SpecBuilder()

analysis(spec, four_stages(M, N))
CONTEXTS = {"checkerboard": checkerboard_context, "autoregressive": autoregressive_context}
chosen = CONTEXTS.get(sys.argv[1][2:]) if sys.argv[1:] else None


def context(spec, params):
    """The chosen context model on the hyper-synthesis output `params`."""
    return chosen(spec, M, params)


mean_scale_hyperprior(spec, N, M, context if chosen else None)
synthesis(spec, four_stages(3, N))
losses(spec, ["likelihoods", "z_likelihoods"])
MBT2018_MEAN = (
    "analysis and synthesis as bmshj2018-hyperprior; hyper-analysis y (not |y|) -> conv 3x3/1 "
    "(192->128) -> LeakyReLU -> conv 5x5/2 -> LeakyReLU -> conv 5x5/2 = z; z_hat with uniform noise (training) or "
    "rounding (eval) under a factorized entropy model; hyper-synthesis transposed conv 5x5/2 (128->192) -> "
    "LeakyReLU -> transposed conv 5x5/2 (192->288) -> LeakyReLU -> conv 3x3/1 (288->384)")
if autoregressive:
    spec.print_spec("mbt2018", (
        "Minnen, Balle, Toderici, Joint autoregressive and hierarchical priors for learned image compression "
        "(NeurIPS 2018), as CompressAI's mbt2018 at its lower qualities (N=192, M=192): analysis and synthesis as "
        "bmshj2018-hyperprior with 192 channels between; hyper-analysis y -> conv 3x3/1 (192->192) -> LeakyReLU -> "
        "conv 5x5/2 -> LeakyReLU -> conv 5x5/2 = z; z_hat with uniform noise (training) or rounding (eval) under a "
        "factorized entropy model; hyper-synthesis transposed conv 5x5/2 (192->192) -> LeakyReLU -> transposed conv "
        "5x5/2 (192->288) -> LeakyReLU -> conv 3x3/1 (288->384) = hyper_params. The context model: the rounded "
        "latent (UniformNoise of y: noise in training, rounding in eval), a conv 5x5/1 (192->384) with the "
        "raster-scan mask A (each position reads only the positions above it and to its left). Entropy "
        "parameters: 1x1 convs of [hyper_params, context] (768->640->512->384, LeakyReLU between), split into the "
        "scales and the means of a Gaussian conditional for y_hat = QuantizeAroundMean(y, means). The codec codes "
        "the latent position by position, each position's scales and means from z_hat and the positions decoded "
        "before it. Total stride 64. Loss = lambda * 255^2 * mse + bpp."), AUTOREGRESSIVE_CODEC)
elif not checkerboard:
    spec.print_spec("mbt2018-mean", (
        "Minnen, Balle, Toderici, Joint autoregressive and hierarchical priors for learned image compression "
        "(NeurIPS 2018), its mean-scale hyperprior without the context model, as in CompressAI's mbt2018-mean "
        "(N=128, M=192): " + MBT2018_MEAN + ", split into the scales "
        "(first 192 channels) and the means (last 192) of a Gaussian conditional for y_hat. y_hat is y plus uniform "
        "noise in training and round(y - means) + means in eval (QuantizeAroundMean), the likelihood that of y_hat - "
        "means. Total stride 64 (the hyper-latent). Loss = lambda * 255^2 * mse + bpp, bpp the bits of y_hat and "
        "z_hat together. For high rates (CompressAI's qualities 5 to 8) use N=192, M=320: every out_channels of 128 "
        "becomes 192, g_a3 and h_s0 give 320, h_s1 480, h_s2 640, and the split sizes are [320, 320]."))
else:
    spec.print_spec("checkerboard-mean-scale", (
        "He, Zheng, Sun, Wang, Qin, Checkerboard context model for efficient learned image compression (CVPR "
        "2021), on mbt2018-mean (N=128, M=192): " + MBT2018_MEAN + " = hyper_params. The checkerboard context: "
        "the rounded latent (UniformNoise of y: noise in training, rounding in eval) kept at the anchors, the "
        "positions with h + w even (CheckerboardMask even), a conv 5x5/1 (192->384), kept at the other positions "
        "(CheckerboardMask odd: the anchors' context is 0). Entropy parameters: 1x1 convs of [hyper_params, "
        "context] (768->640->512->384, LeakyReLU between), split into the scales and the means of a Gaussian "
        "conditional for y_hat = QuantizeAroundMean(y, means). The codec codes the anchors first, their scales and "
        "means from z_hat alone, then the other positions with the decoded anchors as the context's input, each "
        "pass over every position at once. Total stride 64. Loss = lambda * 255^2 * mse + bpp."), CHECKERBOARD_CODEC)

#!/usr/bin/env python3
"""Writes models/specs/mbt2018-mean.json: the mean-scale hyperprior of Minnen, Balle, Toderici,
"Joint autoregressive and hierarchical priors for learned image compression" (NeurIPS 2018)
without the context model, as CompressAI's mbt2018-mean (N = 128, M = 192).

usage: models/builders/make_mbt2018_mean.py > models/specs/mbt2018-mean.json
"""
from balle_transforms import GAUSSIAN, analysis, factorized_entropy_model, four_stages, losses, synthesis
from spec_builder import SpecBuilder

M = 192
spec = SpecBuilder()
node, conv = spec.node, spec.conv


def leaky(name, x):
    return node(name + "_act", "LeakyReLU", [x], [name + "_leaky"])


analysis(spec, four_stages(M))
x = leaky("h_a0", conv("h_a0", "y", 128, 3))
x = leaky("h_a1", conv("h_a1", x, 128, 5, 2))
conv("h_a2", x, 128, 5, 2, output="z")
node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
factorized_entropy_model(spec, "hyper_entropy_model", "z_hat", "z_likelihoods")
x = leaky("h_s0", conv("h_s0", "z_hat", M, 5, 2, transposed=True))
x = leaky("h_s1", conv("h_s1", x, M * 3 // 2, 5, 2, transposed=True))
conv("h_s2", x, 2 * M, 3, output="gaussian_params")
node("gaussian_params_split", "Split", ["gaussian_params"], ["scales", "means"], sizes=[M, M])
node("quantizer", "QuantizeAroundMean", ["y", "means"], ["y_hat"], synthesis="noise")
node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"], **GAUSSIAN)
synthesis(spec, four_stages(3))
losses(spec, ["likelihoods", "z_likelihoods"])
spec.print_spec("mbt2018-mean", (
    "Minnen, Balle, Toderici, Joint autoregressive and hierarchical priors for learned image compression "
    "(NeurIPS 2018), its mean-scale hyperprior without the context model, as in CompressAI's mbt2018-mean "
    "(N=128, M=192): analysis and synthesis as bmshj2018-hyperprior; hyper-analysis y (not |y|) -> conv 3x3/1 "
    "(192->128) -> LeakyReLU -> conv 5x5/2 -> LeakyReLU -> conv 5x5/2 = z; z_hat with uniform noise (training) or "
    "rounding (eval) under a factorized entropy model; hyper-synthesis transposed conv 5x5/2 (128->192) -> "
    "LeakyReLU -> transposed conv 5x5/2 (192->288) -> LeakyReLU -> conv 3x3/1 (288->384), split into the scales "
    "(first 192 channels) and the means (last 192) of a Gaussian conditional for y_hat. y_hat is y plus uniform "
    "noise in training and round(y - means) + means in eval (QuantizeAroundMean), the likelihood that of y_hat - "
    "means. Total stride 64 (the hyper-latent). Loss = lambda * 255^2 * mse + bpp, bpp the bits of y_hat and "
    "z_hat together. For high rates (CompressAI's qualities 5 to 8) use N=192, M=320: every out_channels of 128 "
    "becomes 192, g_a3 and h_s0 give 320, h_s1 480, h_s2 640, and the split sizes are [320, 320]."))

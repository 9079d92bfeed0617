#!/usr/bin/env python3
"""Writes models/specs/bmshj2018-hyperprior.json: the scale hyperprior of Balle, Minnen, Singh,
Hwang, Johnston, "Variational image compression with a scale hyperprior" (ICLR 2018), as
CompressAI's bmshj2018-hyperprior (N = 128, M = 192).

usage: models/builders/make_bmshj2018_hyperprior.py > models/specs/bmshj2018-hyperprior.json
"""
from balle_transforms import GAUSSIAN, analysis, factorized_entropy_model, four_stages, losses, synthesis
from spec_builder import SpecBuilder

spec = SpecBuilder()
node, conv = spec.node, spec.conv


def relu(name, x, output=None):
    return node(name + "_relu", "ReLU", [x], [output or name + "_act"])


analysis(spec, four_stages(192))
x = node("h_a_abs", "Abs", ["y"], ["y_abs"])
x = relu("h_a0", conv("h_a0", x, 128, 3))
x = relu("h_a1", conv("h_a1", x, 128, 5, 2))
conv("h_a2", x, 128, 5, 2, output="z")
node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
factorized_entropy_model(spec, "hyper_entropy_model", "z_hat", "z_likelihoods")
x = relu("h_s0", conv("h_s0", "z_hat", 128, 5, 2, transposed=True))
x = relu("h_s1", conv("h_s1", x, 128, 5, 2, transposed=True))
relu("h_s2", conv("h_s2", x, 192, 3, transposed=True), output="scales")
node("quantizer", "UniformNoise", ["y"], ["y_hat"])
node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales"], ["likelihoods"], **GAUSSIAN)
synthesis(spec, four_stages(3))
losses(spec, ["likelihoods", "z_likelihoods"])
spec.print_spec("bmshj2018-hyperprior", (
    "Balle, Minnen, Singh, Hwang, Johnston, Variational image compression with a scale hyperprior (ICLR 2018), "
    "as in CompressAI's bmshj2018-hyperprior (N=128, M=192): analysis and synthesis as bmshj2018-factorized; "
    "hyper-analysis |y| -> conv 3x3/1 (192->128) -> ReLU -> conv 5x5/2 -> ReLU -> conv 5x5/2 = z; z_hat with "
    "uniform noise (training) or rounding (eval) under a factorized entropy model; hyper-synthesis transposed conv "
    "5x5/2 -> ReLU -> transposed conv 5x5/2 -> ReLU -> transposed conv 3x3/1 (128->192; CompressAI has a conv "
    "there, the same function with the kernel flipped) -> ReLU = the scales of a Gaussian conditional for y_hat. "
    "Total stride 64 (the hyper-latent). Loss = lambda * 255^2 * mse + bpp, bpp the bits of y_hat and z_hat "
    "together."))

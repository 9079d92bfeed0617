#!/usr/bin/env python3
"""Writes the models of Balle, Minnen, Singh, Hwang, Johnston, "Variational image compression with a
scale hyperprior" (ICLR 2018): models/specs/bmshj2018-factorized.json, its factorized-prior baseline;
with --hyperprior, models/specs/bmshj2018-hyperprior.json, the scale hyperprior as CompressAI's
bmshj2018-hyperprior (N = 128, M = 192); with --bls2017, models/specs/bls2017.json: Balle, Laparra,
Simoncelli, "End-to-end optimized image compression" (ICLR 2017), a factorized prior under a
three-stage GDN analysis.

usage: models/builders/make_bmshj2018.py > models/specs/bmshj2018-factorized.json
       models/builders/make_bmshj2018.py --hyperprior > models/specs/bmshj2018-hyperprior.json
       models/builders/make_bmshj2018.py --bls2017 > models/specs/bls2017.json
"""
import sys

from balle_transforms import GAUSSIAN, analysis, factorized_entropy_model, four_stages, losses, synthesis
from spec_builder import SpecBuilder

if sys.argv[1:] not in ([], ["--hyperprior"], ["--bls2017"]):
    sys.exit("usage: make_bmshj2018.py [--hyperprior | --bls2017]")
model = sys.argv[1][2:] if sys.argv[1:] else "factorized"
spec = SpecBuilder()
node, conv = spec.node, spec.conv


def relu(name, x, output=None):
    return node(name + "_relu", "ReLU", [x], [output or name + "_act"])


def scale_hyperprior():
    """|y| -> conv 3x3/1 -> ReLU -> conv 5x5/2 -> ReLU -> conv 5x5/2 = z (128 channels) under a factorized
    entropy model; transposed conv 5x5/2 twice and 3x3/1 with ReLUs = the scales of y's Gaussian conditional."""
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


if model == "bls2017":
    analysis(spec, [(128, 9, 4), (128, 5, 2), (128, 5, 2)])
else:
    analysis(spec, four_stages(192))
if model == "hyperprior":
    scale_hyperprior()
else:
    node("quantizer", "UniformNoise", ["y"], ["y_hat"])
    factorized_entropy_model(spec, "entropy_model", "y_hat", "likelihoods")
synthesis(spec, [(128, 5, 2), (128, 5, 2), (3, 9, 4)] if model == "bls2017" else four_stages(3))
if model == "hyperprior":
    losses(spec, ["likelihoods", "z_likelihoods"])
    spec.print_spec("bmshj2018-hyperprior", (
        "Balle, Minnen, Singh, Hwang, Johnston, Variational image compression with a scale hyperprior (ICLR 2018), "
        "as in CompressAI's bmshj2018-hyperprior (N=128, M=192): analysis and synthesis as bmshj2018-factorized; "
        "hyper-analysis |y| -> conv 3x3/1 (192->128) -> ReLU -> conv 5x5/2 -> ReLU -> conv 5x5/2 = z; z_hat with "
        "uniform noise (training) or rounding (eval) under a factorized entropy model; hyper-synthesis transposed "
        "conv 5x5/2 -> ReLU -> transposed conv 5x5/2 -> ReLU -> transposed conv 3x3/1 (128->192; CompressAI has a "
        "conv there, the same function with the kernel flipped) -> ReLU = the scales of a Gaussian conditional for "
        "y_hat. Total stride 64 (the hyper-latent). Loss = lambda * 255^2 * mse + bpp, bpp the bits of y_hat and "
        "z_hat together."))
elif model == "bls2017":
    losses(spec, ["likelihoods"])
    spec.print_spec("bls2017", (
        "Balle, Laparra, Simoncelli, End-to-end optimized image compression (ICLR 2017): analysis conv 9x9/4, GDN, "
        "conv 5x5/2, GDN, conv 5x5/2 (N=128); synthesis mirrored with transposed convolutions and IGDN; uniform "
        "noise (training) or rounding (eval) on the latent, factorized entropy model. Total stride 16. "
        "Loss = lambda * 255^2 * mse + bpp."))
else:
    losses(spec, ["likelihoods"])
    spec.print_spec("bmshj2018-factorized", (
        "Balle, Minnen, Singh, Hwang, Johnston, Variational image compression with a scale hyperprior (ICLR 2018), "
        "its factorized-prior baseline: four conv 5x5/2 with GDN between (3->128->128->128->192); synthesis "
        "mirrored with transposed convolutions and IGDN; uniform noise (training) or rounding (eval), factorized "
        "entropy model. Total stride 16. Loss = lambda * 255^2 * mse + bpp."))

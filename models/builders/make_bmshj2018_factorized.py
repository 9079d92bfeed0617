#!/usr/bin/env python3
"""Writes models/specs/bmshj2018-factorized.json: the factorized-prior baseline of Balle, Minnen,
Singh, Hwang, Johnston, "Variational image compression with a scale hyperprior" (ICLR 2018).

usage: models/builders/make_bmshj2018_factorized.py > models/specs/bmshj2018-factorized.json
"""
from balle_transforms import analysis, factorized_entropy_model, four_stages, losses, synthesis
from spec_builder import SpecBuilder

spec = SpecBuilder()
analysis(spec, four_stages(192))
spec.node("quantizer", "UniformNoise", ["y"], ["y_hat"])
factorized_entropy_model(spec, "entropy_model", "y_hat", "likelihoods")
synthesis(spec, four_stages(3))
losses(spec, ["likelihoods"])
spec.print_spec("bmshj2018-factorized", (
    "Balle, Minnen, Singh, Hwang, Johnston, Variational image compression with a scale hyperprior (ICLR 2018), "
    "its factorized-prior baseline: four conv 5x5/2 with GDN between (3->128->128->128->192); synthesis mirrored "
    "with transposed convolutions and IGDN; uniform noise (training) or rounding (eval), factorized entropy model. "
    "Total stride 16. Loss = lambda * 255^2 * mse + bpp."))

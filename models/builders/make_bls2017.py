#!/usr/bin/env python3
"""Writes models/specs/bls2017.json: Balle, Laparra, Simoncelli, "End-to-end optimized image
compression" (ICLR 2017), a factorized prior under a three-stage GDN analysis.

usage: models/builders/make_bls2017.py > models/specs/bls2017.json
"""
from balle_transforms import analysis, factorized_entropy_model, losses, synthesis
from spec_builder import SpecBuilder

spec = SpecBuilder()
analysis(spec, [(128, 9, 4), (128, 5, 2), (128, 5, 2)])
spec.node("quantizer", "UniformNoise", ["y"], ["y_hat"])
factorized_entropy_model(spec, "entropy_model", "y_hat", "likelihoods")
synthesis(spec, [(128, 5, 2), (128, 5, 2), (3, 9, 4)])
losses(spec, ["likelihoods"])
spec.print_spec("bls2017", (
    "Balle, Laparra, Simoncelli, End-to-end optimized image compression (ICLR 2017): analysis conv 9x9/4, GDN, "
    "conv 5x5/2, GDN, conv 5x5/2 (N=128); synthesis mirrored with transposed convolutions and IGDN; uniform noise "
    "(training) or rounding (eval) on the latent, factorized entropy model. Total stride 16. "
    "Loss = lambda * 255^2 * mse + bpp."))

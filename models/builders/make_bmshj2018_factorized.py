#!/usr/bin/env python3
"""Writes models/specs/bmshj2018-factorized.json: the factorized-prior baseline of Balle, Minnen,
Singh, Hwang, Johnston, "Variational image compression with a scale hyperprior" (ICLR 2018); with
--bls2017, models/specs/bls2017.json: Balle, Laparra, Simoncelli, "End-to-end optimized image
compression" (ICLR 2017), a factorized prior under a three-stage GDN analysis.

usage: models/builders/make_bmshj2018_factorized.py > models/specs/bmshj2018-factorized.json
       models/builders/make_bmshj2018_factorized.py --bls2017 > models/specs/bls2017.json
"""
import sys

from balle_transforms import analysis, factorized_entropy_model, four_stages, losses, synthesis
from spec_builder import SpecBuilder

if sys.argv[1:] not in ([], ["--bls2017"]):
    sys.exit("usage: make_bmshj2018_factorized.py [--bls2017]")
bls2017 = sys.argv[1:] == ["--bls2017"]
spec = SpecBuilder()
analysis(spec, [(128, 9, 4), (128, 5, 2), (128, 5, 2)] if bls2017 else four_stages(192))
spec.node("quantizer", "UniformNoise", ["y"], ["y_hat"])
factorized_entropy_model(spec, "entropy_model", "y_hat", "likelihoods")
synthesis(spec, [(128, 5, 2), (128, 5, 2), (3, 9, 4)] if bls2017 else four_stages(3))
losses(spec, ["likelihoods"])
if bls2017:
    spec.print_spec("bls2017", (
        "Balle, Laparra, Simoncelli, End-to-end optimized image compression (ICLR 2017): analysis conv 9x9/4, GDN, "
        "conv 5x5/2, GDN, conv 5x5/2 (N=128); synthesis mirrored with transposed convolutions and IGDN; uniform "
        "noise (training) or rounding (eval) on the latent, factorized entropy model. Total stride 16. "
        "Loss = lambda * 255^2 * mse + bpp."))
else:
    spec.print_spec("bmshj2018-factorized", (
        "Balle, Minnen, Singh, Hwang, Johnston, Variational image compression with a scale hyperprior (ICLR 2018), "
        "its factorized-prior baseline: four conv 5x5/2 with GDN between (3->128->128->128->192); synthesis "
        "mirrored with transposed convolutions and IGDN; uniform noise (training) or rounding (eval), factorized "
        "entropy model. Total stride 16. Loss = lambda * 255^2 * mse + bpp."))

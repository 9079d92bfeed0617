#!/usr/bin/env python3
"""Writes models/specs/minnen2020-channel.json.

The channel-conditional model of Minnen and Singh, "Channel-wise
autoregressive entropy models for learned image compression" (ICIP 2020),
as tensorflow-compression's ms2020 builds it: analysis and synthesis as
bmshj2018 (N = 192, M = 320), separate hyper-syntheses for the latent's means
and scales, y cut into 10 slices of 32 channels, and for slice i a mean, a
scale and a latent-residual-prediction (LRP) transform reading the
hyper-synthesis' output and the first min(i, 5) decoded slices. The rate is
measured on the noisy y_hat; the synthesis and the later slices read the
straight-through rounded y_hat plus 0.5 tanh(LRP).

usage: models/builders/make_minnen2020_channel.py > models/specs/minnen2020-channel.json
       models/builders/make_minnen2020_channel.py --slices 16,16,32,64,192 > my-model.json

--slices cuts y into uneven slices instead (ELIC's groups, He et al. CVPR
2022: 16, 16, 32, 64 and the rest of the 320 channels); the codec codes any
slicing. The bundled spec is the default, 10 slices of 32.
"""
import argparse

from spec_builder import SpecBuilder

N, M = 192, 320
MAX_SUPPORT = 5
parser = argparse.ArgumentParser(description="Writes the minnen2020-channel spec to standard output.")
parser.add_argument("--slices", default=",".join(["32"] * 10),
                    help="the slices' channels, summing to 320 (default: 10 slices of 32)")
SIZES = [int(c) for c in parser.parse_args().slices.split(",")]
if sum(SIZES) != M or min(SIZES) < 1:
    parser.error(f"the slices must be positive and sum to {M}, not {sum(SIZES)}")
SLICES = len(SIZES)
UNEVEN = SIZES != [32] * 10
spec = SpecBuilder()
node, conv = spec.node, spec.conv


def relu(name, x):
    return spec.activation("ReLU", name, x)


def slice_transform(name, x, channels):
    """conv 5x5 (224) -> ReLU -> conv 5x5 (128) -> ReLU -> conv 3x3 (the slice's channels), as ms2020's."""
    x = relu(name + "0_act", conv(name + "0", x, 224, 5))
    x = relu(name + "1_act", conv(name + "1", x, 128, 5))
    return conv(name + "2", x, channels, 3)


def concat(name, inputs):
    return inputs[0] if len(inputs) == 1 else node(name, "Concat", inputs, [name + "_out"])


# Analysis (stride 16) and hyper-analysis (stride 64).
x = "image"
for k in range(4):
    x = conv(f"g_a{k}", x, M if k == 3 else N, 5, 2)
    if k < 3:
        x = node(f"g_a{k}_gdn", "GDN", [x], [f"g_a{k}_norm"])
node("g_a_out", "Split", [x], [f"y{i}" for i in range(SLICES)], sizes=SIZES)
h = relu("h_a0_act", node("h_a0", "Conv2d", [x], ["h_a0_out"], out_channels=M, kernel=3, stride=1, padding=1))
h = relu("h_a1_act", conv("h_a1", h, 256, 5, 2))
node("h_a2", "Conv2d", [h], ["z"], out_channels=N, kernel=5, stride=2, padding=2)
node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
node("hyper_entropy_model", "FactorizedEntropyModel", ["z_hat"], ["z_likelihoods"],
     filters=[3, 3, 3], init_scale=10, likelihood_bound=1e-9)

# Two hyper-syntheses: the latent's means and its scales.
hyper = {}
for part in ("mean", "scale"):
    h = relu(f"h_s_{part}0_act", conv(f"h_s_{part}0", "z_hat", N, 5, 2, transposed=True))
    h = relu(f"h_s_{part}1_act", conv(f"h_s_{part}1", h, 256, 5, 2, transposed=True))
    hyper[part] = conv(f"h_s_{part}2", h, M, 3)

# The slices, each conditioned on the hyper-synthesis and the first decoded slices.
decoded, noisy, means, scales = [], [], [], []
for i in range(SLICES):
    support = decoded[:min(i, MAX_SUPPORT)]
    mean_support = concat(f"slice{i}_mean_support", [hyper["mean"]] + support)
    scale_support = concat(f"slice{i}_scale_support", [hyper["scale"]] + support)
    mu = slice_transform(f"slice{i}_mean", mean_support, SIZES[i])
    sigma = slice_transform(f"slice{i}_scale", scale_support, SIZES[i])
    node(f"slice{i}_quantizer", "QuantizeAroundMean", [f"y{i}", mu], [f"y_hat{i}", f"y_rounded{i}"],
         synthesis="straight_through")
    lrp_input = concat(f"slice{i}_lrp_support", [mean_support, f"y_rounded{i}"])
    lrp = node(f"slice{i}_lrp_tanh", "Tanh", [slice_transform(f"slice{i}_lrp", lrp_input, SIZES[i])], [f"slice{i}_lrp"],
               scale=0.5)
    decoded.append(node(f"slice{i}_add_lrp", "Add", [f"y_rounded{i}", lrp], [f"y_decoded{i}"]))
    noisy.append(f"y_hat{i}")
    means.append(mu)
    scales.append(sigma)
node("y_hat_join", "Concat", noisy, ["y_hat"])
node("scales_join", "Concat", scales, ["scales"])
node("means_join", "Concat", means, ["means"])
node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"],
     scale_bound=0.11, likelihood_bound=1e-9)
node("y_decoded_join", "Concat", decoded, ["y_decoded"])

# Synthesis.
x = "y_decoded"
for k in range(4):
    x = conv(f"g_s{k}", x, 3 if k == 3 else N, 5, 2, transposed=True)
    if k < 3:
        x = node(f"g_s{k}_igdn", "IGDN", [x], [f"g_s{k}_norm"])
spec.nodes[-1]["outputs"] = ["x_hat"]
node("distortion", "MSELoss", ["x_hat", "image"], ["mse"])
node("rate", "RateLoss", ["likelihoods", "z_likelihoods", "image"], ["bpp"])

description = (
    "Minnen, Singh, Channel-wise autoregressive entropy models for learned image compression (ICIP 2020), "
    "as tensorflow-compression's ms2020: analysis and synthesis as bmshj2018 (N=192, M=320; conv 5x5/2 with "
    "GDN); hyper-analysis y -> conv 3x3 (320) -> ReLU -> conv 5x5/2 (256) -> ReLU -> conv 5x5/2 (192) = z; "
    "two hyper-syntheses, for the latent's means and scales (transposed conv 5x5/2 (192) -> ReLU -> transposed "
    "conv 5x5/2 (256) -> ReLU -> conv 3x3 (320)); y split into 10 slices of 32 channels; slice i's mean, scale "
    "and latent-residual-prediction transforms (conv 5x5 (224) -> ReLU -> conv 5x5 (128) -> ReLU -> conv 3x3 "
    "(32)) read the hyper-synthesis output and the first min(i, 5) decoded slices (the LRP also slice i's own "
    "rounded values); the rate is that of the noisy y_hat under one GaussianConditional over all slices; the "
    "synthesis and later slices read the straight-through rounded slice plus 0.5 tanh(LRP). Stride 64. "
    "compress codes it slice by slice (format version 4). "
    "Generated by models/builders/make_minnen2020_channel.py.")
if UNEVEN:
    description = description.replace("y split into 10 slices of 32 channels",
                                      "y split into slices of " + ", ".join(map(str, SIZES)) + " channels")
spec.print_spec("minnen2020-channel" + ("-uneven" if UNEVEN else ""), description)

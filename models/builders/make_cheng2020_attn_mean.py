#!/usr/bin/env python3
"""Writes models/specs/cheng2020-attn-mean.json.

The analysis and synthesis transforms of Cheng, Sun, Takeuchi, Katto,
"Learned image compression with discretized Gaussian mixture likelihoods and
attention modules" (CVPR 2020; CompressAI's cheng2020-attn), written with the
graph layers: residual blocks (with stride, with sub-pixel upsampling),
simplified attention modules and a sub-pixel last layer. Its entropy model is
the mean-scale hyperprior of mbt2018-mean (N = M = 128) in place of the
paper's Gaussian mixture and context model, so that compress can code it.

usage: models/builders/make_cheng2020_attn_mean.py > models/specs/cheng2020-attn-mean.json
"""
from spec_builder import SpecBuilder

N = 128
spec = SpecBuilder()
node, conv = spec.node, spec.conv


def leaky(name, x):
    return spec.activation("LeakyReLU", name, x)


def relu(name, x):
    return spec.activation("ReLU", name, x)


def add(name, a, b, out=None):
    return node(name, "Add", [a, b], [out or name + "_out"])


def subpel(name, x, out, r=2):
    """conv 3x3 to out * r^2 channels, then PixelShuffle(r)."""
    y = conv(name + "_conv", x, out * r * r, 3)
    return node(name + "_shuffle", "PixelShuffle", [y], [name + "_out"], upscale_factor=r)


def residual_block(name, x, channels):
    """x + leaky(conv3x3(leaky(conv3x3(x))))."""
    y = leaky(name + "_act0", conv(name + "_conv0", x, channels, 3))
    y = leaky(name + "_act1", conv(name + "_conv1", y, channels, 3))
    return add(name + "_add", x, y)


def residual_block_with_stride(name, x, out, stride=2):
    """GDN(conv3x3(leaky(conv3x3/stride(x)))) + conv1x1/stride(x)."""
    y = leaky(name + "_act", conv(name + "_conv0", x, out, 3, stride))
    y = node(name + "_gdn", "GDN", [conv(name + "_conv1", y, out, 3)], [name + "_gdn_out"])
    return add(name + "_add", y, conv(name + "_skip", x, out, 1, stride))


def residual_block_upsample(name, x, out):
    """IGDN(conv3x3(leaky(subpel(x)))) + subpel(x)."""
    y = leaky(name + "_act", subpel(name + "_up", x, out))
    y = node(name + "_igdn", "IGDN", [conv(name + "_conv", y, out, 3)], [name + "_igdn_out"])
    return add(name + "_add", y, subpel(name + "_skip", x, out))


def residual_unit(name, x):
    """relu(x + conv1x1(relu(conv3x3(relu(conv1x1(x)))))), N/2 channels inside."""
    y = relu(name + "_act0", conv(name + "_conv0", x, N // 2, 1))
    y = relu(name + "_act1", conv(name + "_conv1", y, N // 2, 3))
    y = conv(name + "_conv2", y, N, 1)
    return relu(name + "_act2", add(name + "_add", x, y))


def attention(name, x, out=None):
    """x + trunk(x) * sigmoid(mask(x)): the simplified attention module."""
    trunk = x
    for k in range(3):
        trunk = residual_unit(f"{name}_trunk{k}", trunk)
    mask = x
    for k in range(3):
        mask = residual_unit(f"{name}_mask{k}", mask)
    mask = node(name + "_sigmoid", "Sigmoid", [conv(name + "_mask_conv", mask, N, 1)], [name + "_weights"])
    gated = node(name + "_mul", "Mul", [trunk, mask], [name + "_gated"])
    return add(name + "_add", x, gated, out)


# Analysis: image -> y (stride 16).
x = residual_block_with_stride("g_a0", "image", N)
x = residual_block("g_a1", x, N)
x = residual_block_with_stride("g_a2", x, N)
x = attention("g_a3", x)
x = residual_block("g_a4", x, N)
x = residual_block_with_stride("g_a5", x, N)
x = residual_block("g_a6", x, N)
node("g_a7", "Conv2d", [x], ["y_pre"], out_channels=N, kernel=3, stride=2, padding=1)
y = attention("g_a8", "y_pre", "y")

# Mean-scale hyperprior, as mbt2018-mean (M = N).
h = leaky("h_a0_act", conv("h_a0", y, N, 3))
h = leaky("h_a1_act", conv("h_a1", h, N, 5, 2))
node("h_a2", "Conv2d", [h], ["z"], out_channels=N, kernel=5, stride=2, padding=2)
node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
node("hyper_entropy_model", "FactorizedEntropyModel", ["z_hat"], ["z_likelihoods"],
     filters=[3, 3, 3], init_scale=10, likelihood_bound=1e-9)
node("h_s0", "ConvTranspose2d", ["z_hat"], ["h_s0_out"], out_channels=N, kernel=5, stride=2, padding=2,
     output_padding=1)
h = leaky("h_s0_act", "h_s0_out")
node("h_s1", "ConvTranspose2d", [h], ["h_s1_out"], out_channels=N * 3 // 2, kernel=5, stride=2, padding=2,
     output_padding=1)
h = leaky("h_s1_act", "h_s1_out")
node("h_s2", "Conv2d", [h], ["gaussian_params"], out_channels=2 * N, kernel=3, stride=1, padding=1)
node("gaussian_params_split", "Split", ["gaussian_params"], ["scales", "means"], sizes=[N, N])
node("quantizer", "QuantizeAroundMean", [y, "means"], ["y_hat"], synthesis="noise")
node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"],
     scale_bound=0.11, likelihood_bound=1e-9)

# Synthesis: y_hat -> x_hat.
x = attention("g_s0", "y_hat")
x = residual_block("g_s1", x, N)
x = residual_block_upsample("g_s2", x, N)
x = residual_block("g_s3", x, N)
x = residual_block_upsample("g_s4", x, N)
x = attention("g_s5", x)
x = residual_block("g_s6", x, N)
x = residual_block_upsample("g_s7", x, N)
x = residual_block("g_s8", x, N)
y = conv("g_s9_conv", x, 3 * 4, 3)
node("g_s9_shuffle", "PixelShuffle", [y], ["x_hat"], upscale_factor=2)

node("distortion", "MSELoss", ["x_hat", "image"], ["mse"])
node("rate", "RateLoss", ["likelihoods", "z_likelihoods", "image"], ["bpp"])

description = (
    "Cheng, Sun, Takeuchi, Katto, Learned image compression with discretized Gaussian mixture likelihoods "
    "and attention modules (CVPR 2020): the analysis and synthesis of CompressAI's cheng2020-attn (N=128) "
    "in graph layers - residual blocks (3x3 convolutions, LeakyReLU, Add; with stride 2 and a 1x1 skip, "
    "GDN; with sub-pixel upsampling, a 3x3 convolution to 4N channels and PixelShuffle, IGDN), simplified "
    "attention modules x + trunk(x) * Sigmoid(mask(x)) (trunk and mask three residual units each, "
    "ReLU, Mul) and a sub-pixel last layer - with the mean-scale hyperprior of mbt2018-mean (M = N = 128) "
    "in place of the paper's Gaussian mixture and context model, so that compress codes it. Stride 64. "
    "Generated by models/builders/make_cheng2020_attn_mean.py.")
spec.print_spec("cheng2020-attn-mean", description)

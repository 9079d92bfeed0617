#!/usr/bin/env python3
"""PyTorch eager reference for plexus-bench: the same cases (bench_cases.json),
the same timing method (CUDA events, warm-up, median), JSON lines on stdout.

GDN is written the way it is usually written in PyTorch: a 1x1 convolution of
x^2 with gamma, plus beta, then rsqrt and a multiply (autograd for backward),
with the same reparametrisation (lower bound, square, minus pedestal).

  python3 tools/bench/torch_bench.py --cases tools/bench/bench_cases.json [--tf32] [--only TEXT] [--compile]

--compile times each layer under torch.compile (compiled during the warm-up
runs, so the median excludes compilation); the training steps stay eager.
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

PEDESTAL = (2.0 ** -18) ** 2


class GDN(nn.Module):
    def __init__(self, channels, inverse=False, beta_min=1e-6, gamma_init=0.1):
        super().__init__()
        self.inverse = inverse
        self.beta_bound = math.sqrt(beta_min + PEDESTAL)
        self.gamma_bound = 2.0 ** -18
        self.beta = nn.Parameter(torch.sqrt(torch.ones(channels) + PEDESTAL))
        self.gamma = nn.Parameter(torch.sqrt(gamma_init * torch.eye(channels) + PEDESTAL))

    def forward(self, x):
        c = x.shape[1]
        beta = torch.clamp_min(self.beta, self.beta_bound) ** 2 - PEDESTAL
        gamma = torch.clamp_min(self.gamma, self.gamma_bound) ** 2 - PEDESTAL
        norm = F.conv2d(x * x, gamma.view(c, c, 1, 1), beta)
        return x * torch.sqrt(norm) if self.inverse else x * torch.rsqrt(norm)


class FactorizedEntropyModel(nn.Module):
    """Per-channel cumulative density, filters (3,3,3), Balle et al. 2018 appendix 6.1."""

    def __init__(self, channels, filters=(3, 3, 3), init_scale=10.0):
        super().__init__()
        dims = (1,) + tuple(filters) + (1,)
        scale = init_scale ** (1.0 / (len(filters) + 1))
        self.matrices, self.biases, self.factors = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for k in range(len(filters) + 1):
            init = math.log(math.expm1(1.0 / scale / dims[k + 1]))
            self.matrices.append(nn.Parameter(torch.full((channels, dims[k + 1], dims[k]), init)))
            self.biases.append(nn.Parameter(torch.rand(channels, dims[k + 1], 1) - 0.5))
            if k < len(filters):
                self.factors.append(nn.Parameter(torch.zeros(channels, dims[k + 1], 1)))

    def logits(self, v):  # v: [C, 1, L]
        for k in range(len(self.matrices)):
            v = torch.matmul(F.softplus(self.matrices[k]), v) + self.biases[k]
            if k < len(self.factors):
                v = v + torch.tanh(self.factors[k]) * torch.tanh(v)
        return v

    def forward(self, y):
        n, c, h, w = y.shape
        v = y.permute(1, 0, 2, 3).reshape(c, 1, -1)
        lower, upper = self.logits(v - 0.5), self.logits(v + 0.5)
        sign = -torch.sign(lower + upper).detach()
        likelihood = torch.abs(torch.sigmoid(sign * upper) - torch.sigmoid(sign * lower))
        likelihood = torch.clamp_min(likelihood, 1e-9)
        return likelihood.reshape(c, n, h, w).permute(1, 0, 2, 3)


class UniformNoise(nn.Module):
    def forward(self, x):
        return x + torch.empty_like(x).uniform_(-0.5, 0.5)


def conv(cin, cout, k, s):
    return nn.Conv2d(cin, cout, k, s, k // 2)


def deconv(cin, cout, k, s):
    return nn.ConvTranspose2d(cin, cout, k, s, k // 2, output_padding=s - 1)


class Autoencoder(nn.Module):
    def __init__(self, name):
        super().__init__()
        if name == "bls2017":
            n = m = 128
            self.g_a = nn.Sequential(conv(3, n, 9, 4), GDN(n), conv(n, n, 5, 2), GDN(n), conv(n, m, 5, 2))
            self.g_s = nn.Sequential(deconv(m, n, 5, 2), GDN(n, True), deconv(n, n, 5, 2), GDN(n, True),
                                     deconv(n, 3, 9, 4))
        else:  # bmshj2018-factorized
            n, m = 128, 192
            self.g_a = nn.Sequential(conv(3, n, 5, 2), GDN(n), conv(n, n, 5, 2), GDN(n), conv(n, n, 5, 2),
                                     GDN(n), conv(n, m, 5, 2))
            self.g_s = nn.Sequential(deconv(m, n, 5, 2), GDN(n, True), deconv(n, n, 5, 2), GDN(n, True),
                                     deconv(n, n, 5, 2), GDN(n, True), deconv(n, 3, 5, 2))
        self.noise = UniformNoise()
        self.entropy = FactorizedEntropyModel(m)

    def forward(self, x, lam):
        y = self.g_a(x)
        y_hat = self.noise(y)
        likelihoods = self.entropy(y_hat)
        x_hat = self.g_s(y_hat)
        n, _, h, w = x.shape
        bpp = -torch.log2(likelihoods).sum() / (n * h * w)
        mse = F.mse_loss(x_hat, x)
        return lam * 255 ** 2 * mse + bpp


def make_layer(case):
    t, p, shape = case["type"], case["params"], case["inputs"][0]
    if t == "Conv2d":
        return nn.Conv2d(shape[1], p["out_channels"], p["kernel"], p.get("stride", 1), p.get("padding", 0))
    if t == "ConvTranspose2d":
        return nn.ConvTranspose2d(shape[1], p["out_channels"], p["kernel"], p.get("stride", 1),
                                  p.get("padding", 0), output_padding=p.get("output_padding", 0))
    if t in ("GDN", "IGDN"):
        return GDN(shape[1], inverse=(t == "IGDN"))
    if t == "UniformNoise":
        return UniformNoise()
    if t == "FactorizedEntropyModel":
        return FactorizedEntropyModel(shape[1])
    if t == "MSELoss":
        return lambda a, b: F.mse_loss(a, b)
    if t == "RateLoss":
        return lambda lik, img: -torch.log2(lik).sum() / (img.shape[0] * img.shape[2] * img.shape[3])
    raise ValueError(t)


def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def time_layer(case, warmup, repeats, compile_layer=False):
    dev = torch.device("cuda")
    layer = make_layer(case)
    if isinstance(layer, nn.Module):
        layer = layer.to(dev)
    if compile_layer:
        layer = torch.compile(layer)
    inputs = []
    for i, shape in enumerate(case["inputs"]):
        if i == case.get("positive_input", -1):
            t = torch.empty(shape, device=dev).uniform_(0.01, 1.0)
        else:
            t = torch.empty(shape, device=dev).uniform_(-1.0, 1.0)
        differentiable = not (case["type"] == "RateLoss" and i == 1)
        inputs.append(t.requires_grad_(differentiable))
    with torch.no_grad():
        forward_ms = median_ms(lambda: layer(*inputs), warmup, repeats)
    out = layer(*inputs)
    dout = torch.empty_like(out).uniform_(-1.0, 1.0)
    backward_ms = median_ms(lambda: out.backward(dout, retain_graph=True), warmup, repeats)
    return {"kind": "layer", "name": case["name"], "forward_ms": forward_ms, "backward_ms": backward_ms}


def time_model(m, warmup, repeats):
    dev = torch.device("cuda")
    model = Autoencoder(m["name"]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.rand(m["batch"], 3, m["patch"], m["patch"], device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = model(x, m["lambda"])
        loss.backward()
        opt.step()

    ms = median_ms(step, warmup, repeats)
    return {"kind": "train_step", "name": m["name"], "step_ms": ms, "images_per_s": 1000.0 * m["batch"] / ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", default="tools/bench/bench_cases.json")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN convolutions and matmuls")
    ap.add_argument("--compile", action="store_true", help="time the layers under torch.compile (default mode)")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    cases = json.load(open(args.cases))
    for c in cases["layers"]:
        if args.only in c["name"]:
            print(json.dumps(time_layer(c, args.warmup, args.repeats, args.compile)), flush=True)
    for m in cases["models"]:
        if args.only in m["name"]:
            print(json.dumps(time_model(m, args.warmup, max(5, args.repeats // 2))), flush=True)


if __name__ == "__main__":
    main()

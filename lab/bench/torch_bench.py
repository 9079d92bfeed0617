#!/usr/bin/env python3
"""PyTorch eager reference for plexus-bench: the same cases (bench_cases.json),
the same timing method (CUDA events, warm-up, median), JSON lines on stdout.

GDN is written the way it is usually written in PyTorch: a 1x1 convolution of
x^2 with gamma, plus beta, then rsqrt and a multiply (autograd for backward),
with the same reparametrisation (lower bound, square, minus pedestal).

  python3 lab/bench/torch_bench.py --cases lab/bench/bench_cases.json [--precision f32|tf32|bf16]

Precision, as Plexus's --precision: f32 = no TF32 anywhere; tf32 = TF32 in
cuDNN convolutions and cuBLAS matmuls; bf16 = autocast to bfloat16 with
channels_last tensors.

SoftmaxProjection is nn.Linear followed by F.cross_entropy against integer
labels (the case's labels_input). The training steps are also timed under torch.compile
(rows "<model> (torch.compile)"; --no-compile skips them). A first line times
an 8192^3 matmul at the chosen precision: the ceiling (tensor cores for tf32
and bf16) that compare.py sets the convolutions' TFLOP/s against.

--compile-layers times the layers under torch.compile instead of eagerly
(compiled during the warm-up runs, so the median excludes compilation).
"""
import contextlib
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


class SoftmaxProjection(nn.Module):
    """nn.Linear to the vocabulary logits, then the mean cross-entropy (under
    autocast the Linear runs in bf16 and cross_entropy in f32)."""

    def __init__(self, features, vocab):
        super().__init__()
        self.linear = nn.Linear(features, vocab)

    def forward(self, f, labels):
        return F.cross_entropy(self.linear(f.flatten(1)), labels)


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
    if t == "SoftmaxProjection":
        return SoftmaxProjection(math.prod(shape[1:]), p["vocab_size"])
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


def autocast(precision):
    if precision == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def memory_format(precision):
    return torch.channels_last if precision == "bf16" else torch.contiguous_format


def time_layer(case, warmup, repeats, precision, compile_layer=False):
    dev = torch.device("cuda")
    layer = make_layer(case)
    if isinstance(layer, nn.Module):
        layer = layer.to(dev, memory_format=memory_format(precision))
    if compile_layer:
        layer = torch.compile(layer)
    inputs = []
    for i, shape in enumerate(case["inputs"]):
        if i == case.get("labels_input", -1):  # integer class labels, no gradient
            inputs.append(torch.randint(0, case["params"]["vocab_size"], shape, device=dev))
            continue
        if i == case.get("positive_input", -1):
            t = torch.empty(shape, device=dev).uniform_(0.01, 1.0)
        else:
            t = torch.empty(shape, device=dev).uniform_(-1.0, 1.0)
        if t.dim() == 4:
            t = t.contiguous(memory_format=memory_format(precision))
        differentiable = not (case["type"] == "RateLoss" and i == 1)
        inputs.append(t.requires_grad_(differentiable))

    def forward():
        with autocast(precision):
            return layer(*inputs)

    with torch.no_grad():
        forward_ms = median_ms(forward, warmup, repeats)
    out = forward()
    dout = torch.empty_like(out).uniform_(-1.0, 1.0)
    backward_ms = median_ms(lambda: out.backward(dout, retain_graph=True), warmup, repeats)
    return {"kind": "layer", "name": case["name"], "forward_ms": forward_ms, "backward_ms": backward_ms}


def time_model(m, warmup, repeats, precision, compiled):
    dev = torch.device("cuda")
    model = Autoencoder(m["name"]).to(dev, memory_format=memory_format(precision))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.rand(m["batch"], 3, m["patch"], m["patch"], device=dev)
    x = x.contiguous(memory_format=memory_format(precision))
    run = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=False)
        with autocast(precision):
            loss = run(x, m["lambda"])
        loss.backward()
        opt.step()

    # torch.compile traces and tunes during the first calls: warm up longer.
    ms = median_ms(step, warmup + (10 if compiled else 0), repeats)
    name = m["name"] + (" (torch.compile)" if compiled else "")
    return {"kind": "train_step", "name": name, "step_ms": ms, "images_per_s": 1000.0 * m["batch"] / ms}


def time_matmul_ceiling(precision, size=8192, warmup=3, repeats=10):
    """TFLOP/s of one size^3 matmul at this precision (cuBLAS): the ceiling."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    ms = median_ms(lambda: a @ b, warmup, repeats)
    return {"kind": "ceiling", "name": f"matmul {size}^3", "ms": ms, "tflops": 2.0 * size ** 3 / ms / 1e9}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", default="lab/bench/bench_cases.json")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="f32")
    ap.add_argument("--tf32", action="store_true", help="deprecated: same as --precision tf32")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile training-step rows")
    ap.add_argument("--compile-layers", action="store_true", help="time the layers under torch.compile instead of eagerly")
    args = ap.parse_args()
    precision = "tf32" if args.tf32 else args.precision
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    cases = json.load(open(args.cases))
    print(json.dumps(dict(time_matmul_ceiling(precision), precision=precision)), flush=True)
    for c in cases["layers"]:
        if args.only in c["name"]:
            row = time_layer(c, args.warmup, args.repeats, precision, compile_layer=args.compile_layers)
            print(json.dumps(dict(row, precision=precision, compiled=args.compile_layers)), flush=True)
    for m in cases["models"]:
        if args.only in m["name"]:
            for compiled in ([False] if args.no_compile else [False, True]):
                row = time_model(m, args.warmup, max(5, args.repeats // 2), precision, compiled)
                print(json.dumps(dict(row, precision=precision)), flush=True)


if __name__ == "__main__":
    main()

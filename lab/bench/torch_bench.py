#!/usr/bin/env python3
"""PyTorch reference for plexus-bench: the same cases (bench_cases.json),
the same timing method (CUDA events, warm-up, median), JSON lines on stdout.

  python3 lab/bench/torch_bench.py --cases lab/bench/bench_cases.json [--precision f32|tf32|bf16] [--models]
      [--setting eager,compile,compile-bf16,strongest,compressai] [--span] [--timed-steps N]

Precision, as Plexus's --precision: f32 = no TF32 anywhere; tf32 = TF32 in
cuDNN convolutions and cuBLAS matmuls; bf16 = autocast to bfloat16 with
channels_last tensors.

Layers: GDN as it is usually written in PyTorch (a 1x1 convolution of x^2
with gamma, plus beta, then rsqrt and a multiply; autograd for backward),
with the same reparametrisation; SoftmaxProjection is nn.Linear followed by
F.cross_entropy against integer labels (the case's labels_input).
--compile-layers times the layers under torch.compile instead of eagerly
(compiled during the warm-up runs, so the median excludes compilation).

Models: one training step (forward, loss lambda * 255^2 * mse + bpp,
backward, Adam) of a PyTorch module translated from the same model spec
file plexus-bench reads (spec_torch.py), so the architecture is the same by
construction. A case's "spec" may be the spec itself; "step_loss": "mse"
(with "channels", the input's) makes it a one-layer step whose loss is
lambda * 255^2 * mse alone (layers_v2_cases.json). Each model is timed in these settings, "setting" in its rows
(--setting picks some, comma-separated; default all):
  eager          at the run's precision
  compile        torch.compile, at the run's precision
  compile-bf16   torch.compile with bf16 autocast and channels_last (not
                 repeated in a bf16 run, where "compile" is that already)
  strongest      PyTorch's strongest setting: torch.compile's max-autotune
                 kernels, bf16 autocast, channels_last, capturable (fused)
                 Adam, and the whole step (zeroing of the gradients, forward,
                 backward, Adam) recorded as one CUDA graph and replayed
                 (torch_strongest.py says how and why). Timed over
                 --timed-steps consecutive replays between two CUDA events;
                 a replay launches the whole step at once, so this is the
                 GPU-bound rate. Always bf16, whatever the run's precision.
and, where CompressAI (imported only then) has the same model, its own
implementation eager and compiled ("framework": "compressai"; --setting
compressai picks them). Every model row carries "peak_bytes",
torch.cuda.max_memory_allocated over building the case and its timed steps;
the eager and compiled rows also "gpu_busy_step_ms", the GPU's busy time per
step over five more steps traced by torch.profiler (the union of the
kernels', copies' and fills' intervals): the step's time if the GPU never
waited for Python to launch its work. --span times eager and compiled steps
as the strongest one: --timed-steps consecutive steps between two CUDA
events, instead of the median of single steps. --no-compile skips the
compiled settings; --models skips the layers.

A first line times an 8192^3 matmul at the chosen precision: the ceiling
(tensor cores for tf32 and bf16) that compare.py sets the convolutions'
TFLOP/s against ("tflops" from the median time, "best_tflops" from the
fastest of the repeats: headline.py's measured peak).
"""
import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import spec_torch
import torch_strongest
from spec_torch import GDN, FactorizedEntropyModel


class SoftmaxProjection(nn.Module):
    """nn.Linear to the vocabulary logits, then the mean cross-entropy (under
    autocast the Linear runs in bf16 and cross_entropy in f32)."""

    def __init__(self, features, vocab):
        super().__init__()
        self.linear = nn.Linear(features, vocab)

    def forward(self, f, labels):
        return F.cross_entropy(self.linear(f.flatten(1)), labels)


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
        return lambda x: x + torch.empty_like(x).uniform_(-0.5, 0.5)
    if t == "FactorizedEntropyModel":
        return FactorizedEntropyModel(shape[1])
    if t == "MSELoss":
        return lambda a, b: F.mse_loss(a, b)
    if t == "RateLoss":
        return lambda lik, img: -torch.log2(lik).sum() / (img.shape[0] * img.shape[2] * img.shape[3])
    raise ValueError(t)


def span_ms(fn, warmup, steps):
    """Milliseconds per call: CUDA events around `steps` consecutive calls of
    `fn` (no synchronisation between them), after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / steps


def timed_ms(fn, warmup, repeats):
    """The milliseconds of each of `repeats` calls of `fn`, each timed alone
    with CUDA events, after `warmup` untimed calls."""
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
    return times


def median_ms(fn, warmup, repeats):
    return statistics.median(timed_ms(fn, warmup, repeats))


# Chrome-trace categories of the work the GPU does: kernels, copies, fills.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def busy_ms_of_trace(trace_path):
    """The time some device event of a Chrome trace runs (the union of their intervals), in ms."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    intervals = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") in DEVICE_CATEGORIES and "dur" in e)
    if not intervals:
        raise RuntimeError("the trace holds no device events")
    busy, covered = 0.0, intervals[0][0]
    for start, end in intervals:
        busy += max(0.0, end - max(start, covered))
        covered = max(covered, end)
    return busy / 1e3


def gpu_busy_step_ms(step, steps=5):
    """The GPU's busy time per call of `step` over `steps` calls traced by
    torch.profiler: what the step would take if the GPU never waited for the
    host to launch its work (PyTorch's steps wait on Python; a CUDA graph
    would remove most of that wait)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        return busy_ms_of_trace(path) / steps


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


class Setting:
    """How a model's step runs: compile_mode (None: eager; else torch.compile's
    mode), bf16 (bf16 autocast + channels_last whatever the run's precision),
    graph (the whole step recorded as one CUDA graph, torch_strongest.py)."""

    def __init__(self, compile_mode, bf16, graph):
        self.compile_mode, self.bf16, self.graph = compile_mode, bf16, graph

    @property
    def compiled(self):
        return self.compile_mode is not None


SETTINGS = {
    "eager": Setting(None, False, False),
    "compile": Setting("default", False, False),
    "compile-bf16": Setting("default", True, False),
    "strongest": Setting(torch_strongest.STRONGEST_COMPILE_MODE, True, True),
}
# --setting also takes "compressai": CompressAI's own models, eager and compiled.
SETTING_NAMES = tuple(SETTINGS) + ("compressai",)


def parse_settings(text):
    """The names in a comma-separated --setting value, each checked; [] for ''."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in SETTING_NAMES:
            raise ValueError(f"unknown setting '{name}' (choose from {', '.join(SETTING_NAMES)})")
    return names


def settings_for(precision, compile_models):
    """The settings to time: every one, less the compiled ones under
    --no-compile, and less compile-bf16 in a bf16 run (where compile is it)."""
    names = [s for s, setting in SETTINGS.items() if compile_models or not setting.compiled]
    return [s for s in names if not (precision == "bf16" and s == "compile-bf16")]


class RateDistortionStep(nn.Module):
    """The loss of a translated spec, distortion_weight * mse + bpp (without
    the rate: distortion_weight * mse, a one-layer case's loss): only the
    scalar leaves forward, so torch.compile may fuse every intermediate."""

    def __init__(self, model, distortion_weight, rate=True):
        super().__init__()
        self.model = model
        self.distortion_weight = distortion_weight
        self.rate = rate

    def forward(self, **inputs):
        blobs = self.model(**inputs)
        loss = self.distortion_weight * blobs["mse"]
        return loss + blobs["bpp"] if self.rate else loss


def case_lambda(m):
    """"lambda", or for a variable-rate model the mean of its "lambdas" (as plexus-bench)."""
    return statistics.fmean(m["lambdas"]) if "lambdas" in m else m["lambda"]


def layer_step(m):
    """Whether case `m` is a one-layer step: its loss the spec's "mse" alone, its "image" of "channels" channels."""
    step_loss = m.get("step_loss")
    if step_loss not in (None, "mse"):
        raise ValueError(f"case '{m['name']}': \"step_loss\" must be \"mse\", got {json.dumps(step_loss)}")
    return step_loss == "mse"


def case_spec(m):
    """The spec of case `m`: "spec" a path from the repository root, or the spec itself (an object)."""
    return m["spec"] if isinstance(m["spec"], dict) else spec_torch.load_spec(m["spec"])


def spec_inputs(spec, m, dev, fmt):
    """image [N, C, P, P] in [0, 1) (C = "channels", default 3); a variable-rate spec also gets levels n mod K
    and MSE weights 1."""
    n = m["batch"]
    image = torch.rand(n, m.get("channels", 3), m["patch"], m["patch"], device=dev)
    inputs = {"image": image.contiguous(memory_format=fmt)}
    levels = spec_torch.rate_levels(spec)
    if levels:
        inputs["level"] = torch.tensor(spec_torch.spread_levels(n, levels), device=dev)
        inputs["mse_weight"] = torch.ones(n, device=dev)
    return inputs


def reset_memory():
    """Drops what earlier cases left (compiled graphs, cached blocks) and restarts the peak count."""
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def model_row(m, setting, framework, step, ms):
    """The row of a step timed at `ms`: its peak memory so far, then its GPU busy time (more steps, traced)."""
    row = {"kind": "train_step", "name": m["name"], "framework": framework, "setting": setting, "step_ms": ms,
           "images_per_s": 1000.0 * m["batch"] / ms, "peak_bytes": torch.cuda.max_memory_allocated()}
    row["gpu_busy_step_ms"] = gpu_busy_step_ms(step)
    return row


def autocast_on(device, precision):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def spec_case(m, dev, fmt):
    """The spec of case `m` translated to PyTorch, on `dev` in memory format
    `fmt`, in training mode: (its loss module, its input tensors)."""
    spec = case_spec(m)
    model = spec_torch.SpecModel(spec, {"image": m.get("channels", 3)}).to(dev, memory_format=fmt).train()
    loss = RateDistortionStep(model, case_lambda(m) * 255 ** 2, rate=not layer_step(m))
    return loss, spec_inputs(spec, m, dev, fmt)


def spec_step(m, precision, setting, dev):
    """One training step of the spec translated to PyTorch, in one setting
    other than strongest: a function that takes it and returns the loss."""
    setting = SETTINGS[setting]
    step_precision = "bf16" if setting.bf16 else precision
    loss_fn, inputs = spec_case(m, dev, memory_format(step_precision))
    opt = torch.optim.Adam(loss_fn.parameters(), lr=1e-4)
    run = torch.compile(loss_fn) if setting.compiled else loss_fn

    def step():
        opt.zero_grad(set_to_none=False)
        with autocast_on(dev, step_precision):
            loss = run(**inputs)
        loss.backward()
        opt.step()
        return loss

    return step


def strongest_step(m, dev, compile_mode=torch_strongest.STRONGEST_COMPILE_MODE, adam="fused"):
    """The strongest setting's step of case `m`, built and not yet warmed up:
    a torch_strongest.WholeStepGraph (bf16 autocast, channels_last)."""
    loss_fn, inputs = spec_case(m, dev, torch.channels_last)
    return torch_strongest.WholeStepGraph(loss_fn, inputs, compile_mode=compile_mode, adam=adam)


def time_model(m, warmup, repeats, precision, setting, span_steps=0):
    """The row of one setting's step. span_steps > 0: ms per step over that
    many consecutive steps (span_ms); else the median of single steps."""
    reset_memory()
    step = spec_step(m, precision, setting, torch.device("cuda"))
    # torch.compile traces and tunes during the first calls: warm up longer.
    warmup += 10 if SETTINGS[setting].compiled else 0
    ms = span_ms(step, warmup, span_steps) if span_steps > 0 else median_ms(step, warmup, repeats)
    return model_row(m, setting, "pytorch", step, ms)


def time_strongest(m, warmup, timed_steps, adam):
    """The strongest setting's row: warm-up steps (compiling), one capture of
    the whole step, a replay checked to train, then `timed_steps` replays
    timed after `warmup` more. No profiler pass: a replay is one launch, so
    its wall time is its GPU time."""
    reset_memory()
    graph = strongest_step(m, torch.device("cuda"), adam=adam)
    graph.warm_up(max(3, warmup))
    graph.record()
    graph.check_replay_trains()
    ms = graph.time_replays(warmup, timed_steps)
    return {"kind": "train_step", "name": m["name"], "framework": "pytorch", "setting": "strongest",
            "step_ms": ms, "images_per_s": 1000.0 * m["batch"] / ms, "peak_bytes": torch.cuda.max_memory_allocated(),
            "timed_steps": timed_steps, "compile_mode": torch_strongest.STRONGEST_COMPILE_MODE,
            "adam": f"{adam}, capturable", "cuda_graph": "whole step", "precision": "bf16"}


# CompressAI's own implementations of bundled specs, the same channel counts
# (N, M), as CompressAI builds them: its entropy bottleneck has filters
# (3, 3, 3, 3) where the specs have (3, 3, 3), 15 parameters more per
# channel of the bottleneck and nothing else different. bls2017 (9x9/4 first layer), mbt2018-mean-vr (CompressAI's
# variable rate models scale the quantisation step instead of gain units),
# cheng2020-attn-mean (CompressAI's Cheng2020Attention is autoregressive with a
# Gaussian mixture) and minnen2020-channel have no exact twin there.
COMPRESSAI_TWINS = {
    "bmshj2018-factorized": ("FactorizedPrior", 128, 192),
    "bmshj2018-hyperprior": ("ScaleHyperprior", 128, 192),
    "mbt2018-mean": ("MeanScaleHyperprior", 128, 192),
}


def compressai_models():
    """compressai.models, or None (with a note on stderr) when it is not installed."""
    try:
        import compressai.models
    except ImportError as e:
        print(f"torch_bench: CompressAI rows skipped: cannot import compressai ({e})", file=sys.stderr)
        return None
    return compressai.models


def compressai_step(models, m, precision, compiled, dev):
    """A CompressAI training step as its examples/train.py takes one: the
    rate-distortion loss lambda * 255^2 * MSE + bpp (its RateDistortionLoss),
    backward, Adam on every parameter but the entropy bottlenecks'
    quantiles, then the aux loss's backward and its own Adam step on the
    quantiles. train.py's default gradient clipping (norm 1) is left out,
    as Plexus's step does not clip. Returns a function that takes one step
    and returns the loss."""
    cls, n, latent = COMPRESSAI_TWINS[m["name"]]
    fmt = memory_format(precision)
    net = getattr(models, cls)(n, latent).to(dev, memory_format=fmt).train()
    main = [p for name, p in net.named_parameters() if not name.endswith(".quantiles")]
    aux = [p for name, p in net.named_parameters() if name.endswith(".quantiles")]
    opt, aux_opt = torch.optim.Adam(main, lr=1e-4), torch.optim.Adam(aux, lr=1e-3)
    x = torch.rand(m["batch"], 3, m["patch"], m["patch"], device=dev).contiguous(memory_format=fmt)
    weight = case_lambda(m) * 255 ** 2
    pixels = m["batch"] * m["patch"] ** 2

    def loss_of(x):
        out = net(x)
        bpp = sum(torch.log(lik).sum() / (-math.log(2) * pixels) for lik in out["likelihoods"].values())
        return weight * F.mse_loss(out["x_hat"], x) + bpp

    run = torch.compile(loss_of) if compiled else loss_of

    def step():
        opt.zero_grad(set_to_none=False)
        aux_opt.zero_grad(set_to_none=False)
        with autocast_on(dev, precision):
            loss = run(x)
        loss.backward()
        opt.step()
        net.aux_loss().backward()
        aux_opt.step()
        return loss

    return step


def time_compressai(models, m, warmup, repeats, precision, compiled):
    reset_memory()
    step = compressai_step(models, m, precision, compiled, torch.device("cuda"))
    ms = median_ms(step, warmup + (10 if compiled else 0), repeats)
    return model_row(m, "compile" if compiled else "eager", "compressai", step, ms)


def time_matmul_ceiling(precision, size=8192, warmup=3, repeats=10):
    """TFLOP/s of one size^3 matmul at this precision (cuBLAS): the ceiling.
    "tflops" from the median of `repeats` timed products, "best_tflops" from
    the fastest (the measured peak that headline.py divides by)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    times = timed_ms(lambda: a @ b, warmup, repeats)
    ms, best_ms = statistics.median(times), min(times)
    flops = 2.0 * size ** 3
    return {"kind": "ceiling", "name": f"matmul {size}^3", "ms": ms, "tflops": flops / ms / 1e9,
            "best_ms": best_ms, "best_tflops": flops / best_ms / 1e9}


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return value


def not_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return value


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="lab/bench/bench_cases.json")
    ap.add_argument("--warmup", type=not_negative, default=5)
    ap.add_argument("--repeats", type=positive, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="f32")
    ap.add_argument("--tf32", action="store_true", help="deprecated: same as --precision tf32")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile training-step rows")
    ap.add_argument("--setting", "--settings", dest="settings", default="",
                    help="time only these settings of the models, comma-separated: "
                    + ", ".join(SETTING_NAMES) + " (compressai: CompressAI's own models)")
    ap.add_argument("--span", action="store_true", help="time eager and compiled steps over --timed-steps "
                    "consecutive steps between two CUDA events, as the strongest setting's replays")
    ap.add_argument("--timed-steps", type=positive, default=50,
                    help="steps (strongest: graph replays) timed between two CUDA events")
    ap.add_argument("--adam", choices=torch_strongest.ADAM_IMPLEMENTATIONS, default="fused",
                    help="the strongest setting's capturable Adam")
    ap.add_argument("--models", action="store_true", help="time only the models' training steps, not the layers")
    ap.add_argument("--compile-layers", action="store_true",
                    help="time the layers under torch.compile instead of eagerly")
    args = ap.parse_args(argv)
    try:
        args.settings = parse_settings(args.settings)
    except ValueError as e:
        ap.error(f"--setting: {e}")
    if args.no_compile and any(SETTINGS[s].compiled for s in args.settings if s in SETTINGS):
        ap.error("--no-compile contradicts --setting " + ",".join(args.settings))
    return args


def main():
    args = parse_args()
    precision = "tf32" if args.tf32 else args.precision
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    cases = json.load(open(args.cases))
    print(json.dumps(dict(time_matmul_ceiling(precision), precision=precision)), flush=True)
    for c in [] if args.models else cases["layers"]:
        if args.only in c["name"]:
            row = time_layer(c, args.warmup, args.repeats, precision, compile_layer=args.compile_layers)
            print(json.dumps(dict(row, precision=precision, compiled=args.compile_layers)), flush=True)
    model_cases = [m for m in cases["models"] if args.only in m["name"]]
    chosen = args.settings
    span = args.timed_steps if args.span else 0
    for setting in settings_for(precision, not args.no_compile):
        if chosen and setting not in chosen:
            continue
        for m in model_cases:
            if setting == "strongest":
                time_case = lambda: time_strongest(m, args.warmup, args.timed_steps, args.adam)  # noqa: E731
            else:
                time_case = lambda: time_model(m, args.warmup, max(5, args.repeats // 2), precision,  # noqa: E731
                                               setting, span)
            print_row_or_failure(f"{m['name']} ({setting})", precision, time_case)
    twins = [m for m in model_cases if m["name"] in COMPRESSAI_TWINS and (not chosen or "compressai" in chosen)]
    models = compressai_models() if twins else None
    for compiled in ([False] if args.no_compile or models is None else [False, True]):
        for m in twins if models else []:
            print_row_or_failure(f"CompressAI {m['name']} (compiled {compiled})", precision,
                                 lambda: time_compressai(models, m, args.warmup, max(5, args.repeats // 2), precision,
                                                         compiled))


def print_row_or_failure(what, precision, time_case):
    """Prints the case's row; a case that fails (e.g. torch.compile on one
    model) is reported on stderr and the run goes on with the others."""
    try:
        row = time_case()
    except Exception as e:  # noqa: BLE001 - any failure of one case
        print(f"torch_bench: {what} failed, no row: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
        return
    row.setdefault("precision", precision)  # the strongest setting's rows say bf16 themselves
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

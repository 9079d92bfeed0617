#!/usr/bin/env python3
"""PyTorch reference for plexus-codec-bench: the transforms of bls2017 for one
500x500 image (padded to 512x512), eager and torch.compile, f32 without TF32,
timed the way plexus-codec-bench times Plexus's analysis and synthesis:

  analysis:  float image on the host -> GPU -> g_a -> round -> latent on the host
  synthesis: latent on the host -> GPU -> g_s -> clamp, x255, round, uint8 -> image on the host

Wall time (each ends in a copy to the host, which synchronises), median of
--repeats after --warmup. Entropy coding is not part of it (PyTorch has no
rANS coder of its own). Weights are random: the time does not depend on them.
One JSON line per mode.

  python3 lab/bench/torch_codec_bench.py [--model bls2017]
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import spec_torch  # noqa: E402


def transforms(model_name):
    """The analysis and synthesis (nodes g_a*, g_s*) of a bundled spec whose
    transforms are chains of layers with parameters (convolutions and GDN:
    bls2017, bmshj2018-factorized), each as an nn.Sequential."""
    model = spec_torch.SpecModel(spec_torch.load_spec(HERE.parent.parent / "models" / "specs" / f"{model_name}.json"))

    def chain(prefix):
        nodes = [n for n in model.order if n["name"].startswith(prefix)]
        if any(n["name"] not in model.layers for n in nodes):
            raise SystemExit(f"torch_codec_bench: {model_name}'s {prefix} is not a chain of layers with parameters")
        return torch.nn.Sequential(*[model.layers[n["name"]] for n in nodes])

    return chain("g_a"), chain("g_s")


def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="bls2017")
    ap.add_argument("--side", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    analysis_net, synthesis_net = (t.cuda().eval() for t in transforms(args.model))
    image = torch.rand(1, 3, args.side, args.side)
    with torch.no_grad():
        latent = torch.round(analysis_net(image.cuda())).cpu()
        for mode in ("eager", "compile"):
            g_a = analysis_net if mode == "eager" else torch.compile(analysis_net)
            g_s = synthesis_net if mode == "eager" else torch.compile(synthesis_net)

            def analysis():
                return torch.round(g_a(image.cuda())).cpu()

            def synthesis():
                return (g_s(latent.cuda()).clamp(0, 1) * 255).round().to(torch.uint8).cpu()

            warmup = args.warmup if mode == "eager" else args.warmup + 5  # compilation happens in the first calls
            print(json.dumps({"framework": "pytorch", "mode": mode, "model": args.model, "side": args.side,
                              "analysis_ms": median_ms(analysis, warmup, args.repeats),
                              "synthesis_ms": median_ms(synthesis, warmup, args.repeats)}), flush=True)


if __name__ == "__main__":
    main()

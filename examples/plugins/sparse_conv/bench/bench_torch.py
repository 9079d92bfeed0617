#!/usr/bin/env python3
"""PyTorch's dense conv_transpose2d at the shapes of sparse_conv_bench.cu.

Same layers (bls2017's decoder on a 768x512 image), batch 1 and 16, f32 with
TF32 off ("torch-eager-f32", "torch-compile-f32") and on
("torch-eager-tf32"), CUDA events, median of 20 after 3 warm-up calls. One
JSON line per measurement, in the benchmark's format.

usage: bench_torch.py [--no-compile]
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

DECODER = [  # name, in, out, kernel, stride, padding, output_padding, height, width
    ("g_s0", 128, 128, 5, 2, 2, 1, 32, 48),
    ("g_s1", 128, 128, 5, 2, 2, 1, 64, 96),
    ("g_s2", 128, 3, 9, 4, 4, 3, 128, 192),
]


def timed(fn, x, repeats=20):
    for _ in range(3):
        fn(x)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn(x)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    compile_too = "--no-compile" not in sys.argv
    torch.manual_seed(1)
    for name, cin, cout, k, s, p, op, h, w in DECODER:
        weight = (torch.rand(cin, cout, k, k, device="cuda") - 0.5) * 0.2
        bias = torch.zeros(cout, device="cuda")

        def layer(x):
            return F.conv_transpose2d(x, weight, bias, stride=s, padding=p, output_padding=op)

        compiled = torch.compile(layer) if compile_too else None
        for batch in (1, 16):
            x = torch.rand(batch, cin, h, w, device="cuda") - 0.5
            runs = [("torch-eager-f32", layer, False), ("torch-eager-tf32", layer, True)]
            if compiled is not None:
                runs.append(("torch-compile-f32", compiled, False))
            for kernel, fn, tf32 in runs:
                torch.backends.cudnn.allow_tf32 = tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                with torch.no_grad():
                    ms = timed(fn, x)
                print(json.dumps({"layer": name, "batch": batch, "sparsity": 0.0, "kernel": kernel, "ms": ms,
                                  "useful_gflop": 2.0 * cin * cout * k * k * batch * h * w / 1e9,
                                  "bytes": 4 * (x.numel() + batch * cout * ((h - 1) * s - 2 * p + k + op) *
                                                ((w - 1) * s - 2 * p + k + op) + weight.numel()),
                                  "nonzeros": weight.numel()}), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Markdown tables from the JSON lines of sparse_conv_bench and bench_torch.py.

usage: table.py RESULTS.jsonl...
For each layer and batch: the dense kernels (ms), then each sparse kernel at
each sparsity: ms, its speed against Plexus's dense f32 and TF32 forward,
the bytes it must move and the bandwidth that implies, and the useful
GFLOP/s (multiply-adds of non-zero weights only).
"""
import json
import sys


def main():
    rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip().startswith("{")]
    groups = {}
    for r in rows:
        groups.setdefault((r["layer"], r["batch"]), []).append(r)
    print("| layer | batch | kernel | sparsity | ms | vs dense f32 | vs dense TF32 | MB moved | GB/s | useful GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (layer, batch), group in sorted(groups.items()):
        by_kernel = {r["kernel"]: r for r in group if r["sparsity"] == 0.0}
        f32 = by_kernel.get("dense-f32", {}).get("ms")
        tf32 = by_kernel.get("dense-tf32", {}).get("ms")
        for r in sorted(group, key=lambda r: (r["sparsity"], r["kernel"])):
            ratio = lambda base: "" if base is None else "%.2fx" % (base / r["ms"])
            print(f"| {layer} | {batch} | {r['kernel']} | {100 * r['sparsity']:.0f}% | {r['ms']:.3f} | "
                  f"{ratio(f32)} | {ratio(tf32)} | {r['bytes'] / 1e6:.1f} | {r['bytes'] / r['ms'] / 1e6:.0f} | "
                  f"{r['useful_gflop'] / r['ms'] * 1e3:.0f} |")


if __name__ == "__main__":
    main()

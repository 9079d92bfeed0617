#!/usr/bin/env python3
"""Plots a plexus-ae metrics.jsonl (kind "train" rows): loss, PSNR and bpp
against step, smoothed over a window, to a PNG.
  python3 tools/plot_metrics.py runs/x/metrics.jsonl docs/results/curve.png"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def smooth(values, window=20):
    v = np.asarray(values, dtype=float)
    if len(v) < window:
        return v
    return np.convolve(v, np.ones(window) / window, mode="valid")


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
    rows = [r for r in rows if r.get("kind") == "train"]
    if not rows:
        sys.exit(f"plot_metrics: no training rows in {sys.argv[1]}")
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key, label in zip(axes, ["loss", "psnr", "bpp"],
                              ["loss = lambda*255^2*MSE + bpp", "PSNR (dB, training patches)", "bits per pixel"]):
        values = [r[key] for r in rows]
        ax.plot(steps, values, alpha=0.25, color="tab:blue")
        s = smooth(values)
        ax.plot(steps[len(steps) - len(s):], s, color="tab:blue")
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if key == "loss":
            ax.set_yscale("log")
    fig.suptitle(sys.argv[3] if len(sys.argv) > 3 else sys.argv[1])
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Joins plexus-bench and torch_bench.py JSON lines into one markdown table:
Plexus, PyTorch eager, and the speed ratio (PyTorch time / Plexus time, so
> 1 means Plexus is faster). Usage: compare.py plexus.jsonl torch.jsonl"""
import json
import sys


def load(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["name"]] = row
    return rows


def main():
    plexus, torch = load(sys.argv[1]), load(sys.argv[2])
    print("| layer (batch 16, f32) | Plexus fwd ms | PyTorch fwd ms | fwd speed-up | Plexus bwd ms | PyTorch bwd ms | bwd speed-up | fwd+bwd speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, p in plexus.items():
        if p["kind"] != "layer" or name not in torch:
            continue
        t = torch[name]
        both = (t["forward_ms"] + t["backward_ms"]) / (p["forward_ms"] + p["backward_ms"])
        print(f"| {name} | {p['forward_ms']:.3f} | {t['forward_ms']:.3f} | {t['forward_ms'] / p['forward_ms']:.2f}x "
              f"| {p['backward_ms']:.3f} | {t['backward_ms']:.3f} | {t['backward_ms'] / p['backward_ms']:.2f}x | {both:.2f}x |")
    print()
    print("| training step (batch 16, 256x256, Adam) | Plexus ms | PyTorch ms | Plexus img/s | PyTorch img/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, p in plexus.items():
        if p["kind"] != "train_step" or name not in torch:
            continue
        t = torch[name]
        print(f"| {name} | {p['step_ms']:.2f} | {t['step_ms']:.2f} | {p['images_per_s']:.1f} | {t['images_per_s']:.1f} "
              f"| {t['step_ms'] / p['step_ms']:.2f}x |")
    missing = [n for n in plexus if n not in torch] + [n for n in torch if n not in plexus]
    if missing:
        print("\nrows present on one side only: " + ", ".join(missing))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The rows with a FLOP count (convolutions, SoftmaxProjection) of several
run.sh runs, one per precision, side by side: for each layer a row per
precision with Plexus and PyTorch forward and backward times, the speed
ratios (PyTorch time / Plexus time, > 1 means Plexus is faster; fwd+bwd for
both passes together) and the TFLOP/s each side achieves (forward is one pass
of 2*N*Cout*Hout*Wout*Cin*k*k FLOPs or 2*N*F*V, backward two), plus each
precision's matmul ceiling measured by PyTorch in the same run.
Usage: compare_precisions.py DIR [DIR ...], each DIR holding the
plexus.jsonl and torch.jsonl of one precision (run.sh writes them)."""
import os
import sys

from compare import load, rounds_note, tflops  # the same JSON lines, rounds and FLOP rates as one precision's table


def main():
    runs = []  # (precision, plexus rows, torch rows)
    for folder in sys.argv[1:]:
        plexus = load(os.path.join(folder, "plexus.jsonl"))
        torch = load(os.path.join(folder, "torch.jsonl"))
        precision = next((r["precision"] for r in plexus.values() if "precision" in r), os.path.basename(folder))
        runs.append((precision, plexus, torch))
    for precision, _, torch in runs:
        ceiling = next((r for r in torch.values() if r["kind"] == "ceiling"), None)
        if ceiling:
            print(f"- matmul ceiling at {precision} (PyTorch {ceiling['name']}): {ceiling['tflops']:.0f} TFLOP/s")
    note = rounds_note(*[table for _, plexus, torch in runs for table in (plexus, torch)])
    if note:
        print("- " + note, end="")
    print()
    print("| layer (batch 16 unless named) | precision | Plexus fwd ms | PyTorch fwd ms | fwd speed-up | Plexus bwd ms "
          "| PyTorch bwd ms | bwd speed-up | fwd+bwd speed-up | Plexus fwd / bwd TFLOP/s | PyTorch fwd / bwd TFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    names = [n for n, r in runs[0][1].items() if r["kind"] == "layer" and r.get("pass_flops", 0) > 0] if runs else []
    for name in names:
        for precision, plexus, torch in runs:
            if name not in plexus or name not in torch:
                continue
            p, t = plexus[name], torch[name]
            flops = p["pass_flops"]
            rates = [f"{tflops(flops, s['forward_ms']):.0f} / {tflops(2 * flops, s['backward_ms']):.0f}"
                     for s in (p, t)]
            both = (t["forward_ms"] + t["backward_ms"]) / (p["forward_ms"] + p["backward_ms"])
            print(f"| {name} | {precision} | {p['forward_ms']:.3f} | {t['forward_ms']:.3f} "
                  f"| {t['forward_ms'] / p['forward_ms']:.2f}x | {p['backward_ms']:.3f} | {t['backward_ms']:.3f} "
                  f"| {t['backward_ms'] / p['backward_ms']:.2f}x | {both:.2f}x | {rates[0]} | {rates[1]} |")


if __name__ == "__main__":
    main()

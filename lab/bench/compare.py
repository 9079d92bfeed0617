#!/usr/bin/env python3
"""Joins plexus-bench and torch_bench.py JSON lines into markdown tables:
Plexus, PyTorch eager (and torch.compile for training steps), and speed
ratios (PyTorch time / Plexus time, so > 1 means Plexus is faster). For
convolutions and SoftmaxProjection it also prints the achieved TFLOP/s of
both sides (forward is one pass of 2*N*Cout*Hout*Wout*Cin*k*k FLOPs, or
2*N*F*V for the projection; backward two: input and weight gradients) next
to the matmul ceiling torch_bench measured in the same run.
A file may hold several rounds of the same cases (run.sh --rounds N appends
them, alternating the two sides): every timing is then the median over the
rounds, taken per field.
Usage: compare.py plexus.jsonl torch.jsonl"""
import json
import statistics
import sys

# The measured fields; any other field (name, kind, pass_flops...) is the same in every round.
TIMINGS = ("forward_ms", "backward_ms", "step_ms", "images_per_s", "ms", "tflops")


def median_of_rounds(rounds):
    """One row from the rounds of one case: the first round's fields, each
    timing replaced by its median over the rounds, and `rounds` their count."""
    row = dict(rounds[0])
    for field in TIMINGS:
        values = [r[field] for r in rounds if field in r]
        if values:
            row[field] = statistics.median(values)
    row["rounds"] = len(rounds)
    return row


def load(path):
    rounds = {}
    with open(path) as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                # plexus-bench times each model twice under one name: keep both rows.
                key = row["name"] + (" (CUDA graph)" if row["kind"] == "train_step_graph" else "")
                rounds.setdefault(key, []).append(row)
    return {key: median_of_rounds(rows) for key, rows in rounds.items()}


def rounds_note(*tables):
    """'' for single runs, else a line saying the times are medians of N rounds."""
    counts = sorted({r["rounds"] for rows in tables for r in rows.values()})
    if counts == [1] or not counts:
        return ""
    return "Times are medians over " + "/".join(map(str, counts)) + " rounds per side.\n"


def tflops(flops, ms):
    return flops / ms / 1e9


def main():
    plexus, torch = load(sys.argv[1]), load(sys.argv[2])
    precision = next((r.get("precision") for r in plexus.values() if "precision" in r), "f32")
    ceiling = next((r for r in torch.values() if r["kind"] == "ceiling"), None)
    if ceiling:
        print(f"Matmul ceiling at {precision} (PyTorch {ceiling['name']}, same run): "
              f"{ceiling['tflops']:.1f} TFLOP/s\n")
    note = rounds_note(plexus, torch)
    if note:
        print(note)
    print(f"| layer (batch 16 unless named, {precision}) | Plexus fwd ms | PyTorch fwd ms | fwd speed-up | Plexus bwd ms "
          "| PyTorch bwd ms | bwd speed-up | fwd+bwd speed-up | Plexus fwd / bwd TFLOP/s | PyTorch fwd / bwd TFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, p in plexus.items():
        if p["kind"] != "layer" or name not in torch:
            continue
        t = torch[name]
        both = (t["forward_ms"] + t["backward_ms"]) / (p["forward_ms"] + p["backward_ms"])
        flops = p.get("pass_flops", 0.0)
        rates = ["", ""]
        if flops > 0:
            rates = [f"{tflops(flops, s['forward_ms']):.0f} / {tflops(2 * flops, s['backward_ms']):.0f}"
                     for s in (p, t)]
        print(f"| {name} | {p['forward_ms']:.3f} | {t['forward_ms']:.3f} | {t['forward_ms'] / p['forward_ms']:.2f}x "
              f"| {p['backward_ms']:.3f} | {t['backward_ms']:.3f} | {t['backward_ms'] / p['backward_ms']:.2f}x "
              f"| {both:.2f}x | {rates[0]} | {rates[1]} |")
    steps = [(n, p) for n, p in plexus.items()
             if p["kind"] in ("train_step", "train_step_graph") and p["name"] in torch]
    if steps:
        print()
        print(f"| training step (batch 16, 256x256, Adam, {precision}) | Plexus ms | PyTorch eager ms "
              "| torch.compile ms | Plexus img/s | eager img/s | compile img/s | vs eager | vs compile |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, p in steps:
            t = torch[p["name"]]
            c = torch.get(p["name"] + " (torch.compile)")
            c_ms = f"{c['step_ms']:.2f}" if c else "-"
            c_ips = f"{c['images_per_s']:.1f}" if c else "-"
            c_ratio = f"{c['step_ms'] / p['step_ms']:.2f}x" if c else "-"
            print(f"| {name} | {p['step_ms']:.2f} | {t['step_ms']:.2f} | {c_ms} | {p['images_per_s']:.1f} "
                  f"| {t['images_per_s']:.1f} | {c_ips} | {t['step_ms'] / p['step_ms']:.2f}x | {c_ratio} |")
    torch_only = [n for n, r in torch.items() if r["kind"] != "ceiling" and not n.endswith("(torch.compile)")]
    missing = [n for n, p in plexus.items() if p["name"] not in torch] + [n for n in torch_only if n not in plexus]
    if missing:
        print("\nrows present on one side only: " + ", ".join(missing))


if __name__ == "__main__":
    main()

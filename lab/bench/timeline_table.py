#!/usr/bin/env python3
"""Where one CUDA-graph training step's time goes, from the kernel timeline
that plexus-bench --timeline FILE writes (every kernel, memset and copy of a few replayed
steps, with its stream, start and end):
    python3 lab/bench/timeline_table.py FILE [--model NAME]
Per kind of kernel (the kinds of step_kernels.py): how many kernels, their
summed time, the time they ran ALONE (no other kernel running: what the
step would lose, at most, if they took no time) and the time they ran BESIDE
others (overlapped, on another stream). Below, the step's span and how it
splits: before the first kernel (host launch), kernels alone, kernels side by
side, gaps between kernels, after the last kernel. Medians over the steps
of the file."""
import argparse
import collections
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_kernels import kind  # noqa: E402


def segments(kernels):
    """The step cut at every kernel's start and end: (length, running kernels) pieces,
    from the first start to the last end; kernels are dicts with start_us, end_us."""
    points = sorted({k["start_us"] for k in kernels} | {k["end_us"] for k in kernels})
    pieces = []
    for a, b in zip(points, points[1:]):
        running = [k for k in kernels if k["start_us"] <= a and k["end_us"] >= b]
        pieces.append((b - a, running))
    return pieces


def step_summary(kernels, span_us):
    """One step: per kind {count, sum, alone, beside} and the split of its span."""
    kinds = collections.defaultdict(lambda: {"count": 0, "sum": 0.0, "alone": 0.0, "beside": 0.0})
    for k in kernels:
        kinds[kind(k["name"])]["count"] += 1
        kinds[kind(k["name"])]["sum"] += k["end_us"] - k["start_us"]
    split = {"before": 0.0, "alone": 0.0, "side_by_side": 0.0, "gaps": 0.0, "after": 0.0}
    if kernels:
        split["before"] = min(k["start_us"] for k in kernels)
        split["after"] = span_us - max(k["end_us"] for k in kernels)
    for length, running in segments(kernels):
        if not running:
            split["gaps"] += length
        elif len(running) == 1:
            split["alone"] += length
            kinds[kind(running[0]["name"])]["alone"] += length
        else:
            split["side_by_side"] += length
            for k in running:
                kinds[kind(k["name"])]["beside"] += length
    return {"kinds": dict(kinds), "split": split, "span": span_us}


def summaries(rows, model):
    steps = {r["step"]: r["span_us"] for r in rows if r.get("kind") == "timeline_step" and r["model"] == model}
    kernels = collections.defaultdict(list)
    for r in rows:
        if r.get("kind") == "kernel" and r["model"] == model:
            kernels[r["step"]].append(r)
    return [step_summary(kernels[s], span) for s, span in sorted(steps.items())]


def median_of(values):
    return statistics.median(values) if values else 0.0


def print_table(model, steps, out=sys.stdout):
    labels = sorted({label for s in steps for label in s["kinds"]},
                    key=lambda label: -median_of([s["kinds"].get(label, {}).get("alone", 0.0) for s in steps]))
    print(f"{model}: medians of {len(steps)} steps (us)", file=out)
    print(f"{'kind':54} {'kernels':>7} {'sum':>8} {'alone':>8} {'beside':>8}", file=out)
    for label in labels:
        def med(field):
            return median_of([s["kinds"].get(label, {}).get(field, 0.0) for s in steps])
        print(f"{label:54} {med('count'):7.0f} {med('sum'):8.1f} {med('alone'):8.1f} {med('beside'):8.1f}", file=out)
    split = {key: median_of([s["split"][key] for s in steps]) for key in steps[0]["split"]}
    print(f"step span {median_of([s['span'] for s in steps]):.1f}: before the first kernel {split['before']:.1f}, "
          f"kernels alone {split['alone']:.1f}, side by side {split['side_by_side']:.1f}, "
          f"gaps {split['gaps']:.1f}, after the last {split['after']:.1f}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--model", help="only this model (default: every model in the file)")
    args = ap.parse_args()
    rows = []
    for number, line in enumerate(open(args.file), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            sys.exit(f"timeline_table: line {number} of {args.file} is not JSON")
    models = [args.model] if args.model else sorted({r["model"] for r in rows if r.get("kind") == "timeline_step"})
    if not models:
        sys.exit(f"timeline_table: no timeline_step rows in {args.file} (written by plexus-bench --timeline)")
    for model in models:
        steps = summaries(rows, model)
        if not steps:
            sys.exit(f"timeline_table: no steps of '{model}' in {args.file}")
        print_table(model, steps)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Joins plexus-bench and torch_bench.py JSON lines into markdown tables:
Plexus, PyTorch eager, and speed ratios (PyTorch time / Plexus time, so > 1
means Plexus is faster). For
convolutions and SoftmaxProjection it also prints the achieved TFLOP/s of
both sides (forward is one pass of 2*N*Cout*Hout*Wout*Cin*k*k FLOPs, or
2*N*F*V for the projection; backward two: input and weight gradients) next
to the matmul ceiling torch_bench measured in the same run.
A file may hold several rounds of the same cases (run.sh --rounds N appends
them, alternating the two sides): every layer timing is then the median over
the rounds, taken per field.
The training steps get one row per model: Plexus's CUDA-graph and eager
steps (images/s, median over the rounds), each PyTorch setting of the
spec-translated model and CompressAI's own model where timed (images/s of
the fastest round: the reference at its best), each with its peak device
memory, and Plexus's CUDA-graph median over the fastest PyTorch round of any
setting, and over CompressAI's fastest (> 1: Plexus is faster).
Where torch_bench.py also measured the GPU's busy time per step
("gpu_busy_step_ms", under torch.profiler), the table adds each framework's
GPU-bound images/s (batch / busy time; the best of its settings and rounds):
what the same kernels would give if the GPU never waited for Python, and
Plexus's CUDA-graph median over it.
Usage: compare.py plexus.jsonl torch.jsonl

compare.py --precisions DIR [DIR ...], each DIR holding the plexus.jsonl and
torch.jsonl of one precision (run.sh --precision a,b writes them), puts the
runs side by side instead: the rows with a FLOP count (convolutions,
SoftmaxProjection), for each layer a row per precision with both sides'
forward and backward times, the speed ratios (fwd+bwd for both passes
together) and the TFLOP/s each side achieves, plus each precision's matmul
ceiling measured by PyTorch in the same run."""
import json
import os
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


def row_key(row):
    """A case's name, told apart where one name has several rows: plexus-bench's
    eager and CUDA-graph steps, torch_bench's settings and frameworks."""
    key = row["name"]
    if row["kind"] == "train_step_graph":
        key += " (CUDA graph)"
    if "setting" in row:
        key += f" [{row.get('framework', 'pytorch')} {row['setting']}]"
    return key


def load_rounds(path):
    """Every row of a JSON-lines file, grouped by row_key, in file order."""
    rounds = {}
    with open(path) as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                rounds.setdefault(row_key(row), []).append(row)
    return rounds


def load(path):
    return {key: median_of_rounds(rows) for key, rows in load_rounds(path).items()}


SETTINGS = (("pytorch", "eager"), ("pytorch", "compile"), ("pytorch", "compile-bf16"), ("pytorch", "strongest"),
            ("compressai", "eager"), ("compressai", "compile"))


def fastest_round(rows):
    """The round of the most images per second, and the largest peak memory of any round."""
    best = dict(max(rows, key=lambda r: r["images_per_s"]))
    peaks = [r["peak_bytes"] for r in rows if "peak_bytes" in r]
    if peaks:
        best["peak_bytes"] = max(peaks)
    return best


def speed_cell(row):
    """'img/s (peak MiB)', or '-' for a setting not timed."""
    if row is None:
        return "-"
    if "peak_bytes" not in row:
        return f"{row['images_per_s']:.1f}"
    return f"{row['images_per_s']:.1f} ({row['peak_bytes'] / 2 ** 20:.0f} MiB)"


def ratio_cell(plexus, rows):
    """Plexus images/s over the fastest of `rows` (those present), or '-'."""
    rows = [r for r in rows if r is not None]
    if plexus is None or not rows:
        return "-"
    return f"{plexus['images_per_s'] / max(r['images_per_s'] for r in rows):.2f}x"


def gpu_bound(rows):
    """The most images/s any of `rows` would give at its GPU busy time (None if none has one)."""
    rates = [r["images_per_s"] * r["step_ms"] / r["gpu_busy_step_ms"] for r in rows
             if r.get("gpu_busy_step_ms", 0) > 0 and "step_ms" in r]
    return {"images_per_s": max(rates)} if rates else None


def print_model_table(plexus_rounds, torch_rounds, precision):
    names = []
    for rows in list(plexus_rounds.values()) + list(torch_rounds.values()):
        if rows[0]["kind"] in ("train_step", "train_step_graph") and rows[0]["name"] not in names:
            names.append(rows[0]["name"])
    if not names:
        return
    print()
    busy = any("gpu_busy_step_ms" in r for rows in torch_rounds.values() for r in rows)
    print(f"| model (batch 16, 256x256, Adam, {precision}) | Plexus CUDA graph | Plexus eager "
          + "".join(f"| {'PyTorch' if f == 'pytorch' else 'CompressAI'} {s} " for f, s in SETTINGS)
          + "| vs fastest PyTorch | vs fastest CompressAI |"
          + (" PyTorch GPU-bound | CompressAI GPU-bound | vs PyTorch GPU-bound | vs CompressAI GPU-bound |"
             if busy else ""))
    print("|---|" + "---:|" * (4 + len(SETTINGS) + (4 if busy else 0)))
    for name in names:
        graph = plexus_rounds.get(name + " (CUDA graph)")
        eager = plexus_rounds.get(name)
        graph = median_of_rounds(graph) if graph else None
        eager = median_of_rounds(eager) if eager else None
        ref = {}
        for framework, setting in SETTINGS:
            rows = torch_rounds.get(f"{name} [{framework} {setting}]")
            ref[framework, setting] = fastest_round(rows) if rows else None
        pytorch = [ref[k] for k in SETTINGS if k[0] == "pytorch"]
        compressai = [ref[k] for k in SETTINGS if k[0] == "compressai"]
        line = (f"| {name} | {speed_cell(graph)} | {speed_cell(eager)} | "
                + " | ".join(speed_cell(ref[k]) for k in SETTINGS)
                + f" | {ratio_cell(graph, pytorch)} | {ratio_cell(graph, compressai)} |")
        if busy:
            bound = [gpu_bound([r for (f, s) in SETTINGS if f == framework
                                for r in torch_rounds.get(f"{name} [{f} {s}]", [])])
                     for framework in ("pytorch", "compressai")]
            line += ("".join(f" {speed_cell(b)} |" for b in bound)
                     + "".join(f" {ratio_cell(graph, [b])} |" for b in bound))
        print(line)
    print("\nimages/s (peak device memory). Plexus: median over the rounds; PyTorch and CompressAI: the fastest "
          "round of each setting. The ratios are Plexus's CUDA-graph images/s over the fastest PyTorch (or "
          "CompressAI) setting's." + (" GPU-bound: the batch over the GPU's busy time per step (torch.profiler), the "
          "best of every setting and round: the speed of the same kernels with no wait for the host." if busy else ""))


def rounds_note(*tables):
    """'' for single runs, else a line saying the times are medians of N rounds."""
    counts = sorted({r["rounds"] for rows in tables for r in rows.values()})
    if counts == [1] or not counts:
        return ""
    return "Times are medians over " + "/".join(map(str, counts)) + " rounds per side.\n"


def tflops(flops, ms):
    return flops / ms / 1e9


def print_layer_table(layers, torch, precision):
    print(f"| layer (batch 16 unless named, {precision}) | Plexus fwd ms | PyTorch fwd ms | fwd speed-up "
          "| Plexus bwd ms "
          "| PyTorch bwd ms | bwd speed-up | fwd+bwd speed-up | Plexus fwd / bwd TFLOP/s | PyTorch fwd / bwd TFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, p in layers:
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


def print_precisions(folders):
    """The --precisions table: for each layer with a FLOP count a row per precision (one folder each)."""
    runs = []  # (precision, plexus rows, torch rows)
    for folder in folders:
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


def main():
    if sys.argv[1:2] == ["--precisions"]:
        print_precisions(sys.argv[2:])
        return
    plexus, torch = load(sys.argv[1]), load(sys.argv[2])
    precision = next((r.get("precision") for r in plexus.values() if "precision" in r), "f32")
    ceiling = next((r for r in torch.values() if r["kind"] == "ceiling"), None)
    if ceiling:
        print(f"Matmul ceiling at {precision} (PyTorch {ceiling['name']}, same run): "
              f"{ceiling['tflops']:.1f} TFLOP/s\n")
    # The model table says itself how it uses the rounds.
    note = rounds_note(*({k: r for k, r in rows.items() if not r["kind"].startswith("train_step")}
                         for rows in (plexus, torch)))
    if note:
        print(note)
    layers = [(name, p) for name, p in plexus.items() if p["kind"] == "layer" and name in torch]
    if layers:
        print_layer_table(layers, torch, precision)
    print_model_table(load_rounds(sys.argv[1]), load_rounds(sys.argv[2]), precision)
    torch_names = {r["name"] for r in torch.values()}
    plexus_names = {p["name"] for p in plexus.values()}
    missing = [n for n, p in plexus.items() if p["name"] not in torch_names]
    missing += [n for n, r in torch.items() if r["kind"] != "ceiling" and r["name"] not in plexus_names]
    if missing:
        print("\nrows present on one side only: " + ", ".join(missing))


if __name__ == "__main__":
    main()

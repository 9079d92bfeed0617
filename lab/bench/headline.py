#!/usr/bin/env python3
"""The headline comparison of docs/performance.md, from the JSON lines of one
run of lab/bench/headline.sh: per model, Plexus's training step (replayed as a
CUDA graph) against PyTorch eager, torch.compile and PyTorch's strongest
setting (torch_strongest.py: max-autotune kernels, bf16 autocast,
channels_last, the whole step with capturable Adam as one CUDA graph), all at
bf16, batch and patch from the cases file.

  headline.py write --plexus PLEXUS.jsonl --torch TORCH.jsonl --cases lab/bench/headline_cases.json \\
      --out lab/results/speed --device "NVIDIA H200" --commit SHA --command "bash lab/bench/headline.sh" [--only TEXT]
    writes OUT/<model>.json for every model of the cases file (those whose
    name contains TEXT under --only, as the benchmarks select them; the schema of
    lab/results: claim, device, commit, command, date, results), then prints
    the markdown table of them
  headline.py table lab/results/speed/*.json
    prints the markdown table of files written earlier

Rates: images per second of each round (plexus-bench's "train_step_graph"
rows; torch_bench.py's "train_step" rows of settings eager, compile and
strongest), and the fastest round of each. Each setting's ratio is its
fastest round over the strongest setting's fastest round (> 1: faster than
PyTorch at its strongest). FLOPs per step: the sum of plexus-bench --profile's
per-node "flops" (convolutions and GDN, forward and backward; the
element-wise rest is not counted), the same work for both frameworks since
PyTorch runs the same architecture. Achieved TFLOP/s = FLOPs per step *
images per second / batch / 1e12, and its fraction of the measured peak: the
fastest 8192^3 bf16 torch.matmul of the run (torch_bench.py's "ceiling"
rows, "best_tflops"). Standard library only.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

TORCH_SETTINGS = ("strongest", "compile", "eager")  # the table's PyTorch columns, strongest first
STRONGEST_DESCRIPTION = ("torch.compile max-autotune kernels, bf16 autocast, channels_last, capturable Adam, "
                         "the whole step recorded as one CUDA graph")


HOW_TIMED = ("compile_mode", "adam", "cuda_graph", "timed_steps")


class HeadlineError(Exception):
    """Input that cannot give a headline: the message names the file, model or setting."""


def read_lines(path):
    """The JSON objects of a JSON-lines file (lines not starting with '{' are skipped)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise HeadlineError(f"cannot read {path}: {e.strerror}") from e
    rows = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise HeadlineError(f"{path}:{number}: not JSON ({e.msg})") from e
    return rows


def read_json(path):
    """The JSON document in `path`; HeadlineError naming the file when it cannot be read or parsed."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise HeadlineError(f"cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise HeadlineError(f"{path}: not JSON ({e.msg})") from e


def read_cases(path):
    """The models of a cases file (name, batch, patch), in its order."""
    cases = read_json(path)
    models = cases.get("models") if isinstance(cases, dict) else None
    if not models:
        raise HeadlineError(f"{path}: no \"models\"")
    for m in models:
        for key in ("name", "batch", "patch"):
            if key not in m:
                raise HeadlineError(f"{path}: a model has no \"{key}\": {json.dumps(m)}")
    return models


def measured_peak_tflops(torch_rows, path):
    """The largest bf16 matmul rate of the run's ceiling rows (fastest repeat of each)."""
    rates = [r.get("best_tflops", r.get("tflops")) for r in torch_rows
             if r.get("kind") == "ceiling" and r.get("precision") == "bf16"]
    rates = [x for x in rates if x]
    if not rates:
        raise HeadlineError(f"{path}: no bf16 matmul ceiling row (torch_bench.py --precision bf16 prints one first)")
    return max(rates)


def flops_per_step(plexus_rows, model, path):
    """Sum of plexus-bench --profile's "flops" over the model's nodes (each node once)."""
    per_node = {r["node"]: r["flops"] for r in plexus_rows if r.get("kind") == "profile" and r.get("model") == model}
    if not per_node:
        raise HeadlineError(f"{model}: no plexus-bench --profile rows in {path}, so no FLOP count")
    return float(sum(per_node.values()))


def rounds_of(rows):
    """images/s of each row, in file (round) order."""
    return [float(r["images_per_s"]) for r in rows]


def setting_row(framework, setting, rows, batch, flops, peak_tflops, strongest_fastest):
    """One result row: every round, the fastest, the ratio to the strongest
    setting's fastest round, achieved TFLOP/s and its fraction of the peak."""
    rounds = rounds_of(rows)
    fastest = max(rounds)
    tflops = flops * fastest / batch / 1e12
    row = {"framework": framework, "setting": setting,
           "images_per_s": [round(x, 1) for x in rounds],
           "images_per_s_fastest": round(fastest, 1),
           "vs_strongest": round(fastest / strongest_fastest, 3),
           "tflops": round(tflops, 1),
           "peak_fraction": round(tflops / peak_tflops, 4)}
    if framework == "plexus":
        row["images_per_s_median"] = round(statistics.median(rounds), 1)
        row["median_vs_strongest"] = round(statistics.median(rounds) / strongest_fastest, 3)
    peaks = [r["peak_bytes"] for r in rows if "peak_bytes" in r]
    if peaks:
        row["peak_mib"] = round(max(peaks) / 2 ** 20)
    for key in HOW_TIMED:  # how the strongest setting ran, as torch_bench.py says in its rows
        if key in rows[0]:
            row[key] = rows[0][key]
    busy = [r["gpu_busy_step_ms"] for r in rows if r.get("gpu_busy_step_ms", 0) > 0]
    if busy:  # host-bound settings: what their kernels alone would give
        row["gpu_bound_images_per_s"] = round(1000.0 * batch / min(busy), 1)
    return row


def model_result(m, plexus_rows, torch_rows, paths, peak_tflops, meta):
    """The result file of one model, or HeadlineError naming what is missing."""
    name, batch = m["name"], float(m["batch"])
    graph = [r for r in plexus_rows if r.get("kind") == "train_step_graph" and r.get("name") == name]
    if not graph:
        raise HeadlineError(f"{name}: no plexus-bench train_step_graph rows in {paths[0]}")
    by_setting = {s: [r for r in torch_rows if r.get("kind") == "train_step" and r.get("name") == name
                      and r.get("framework", "pytorch") == "pytorch" and r.get("setting") == s]
                  for s in TORCH_SETTINGS}
    if not by_setting["strongest"]:
        raise HeadlineError(f"{name}: no PyTorch 'strongest' rows in {paths[1]} (did that setting fail? "
                            "torch_bench.py says why on stderr)")
    flops = flops_per_step(plexus_rows, name, paths[0])
    strongest_fastest = max(rounds_of(by_setting["strongest"]))
    results = [setting_row("plexus", "cuda-graph", graph, batch, flops, peak_tflops, strongest_fastest)]
    results += [setting_row("pytorch", s, by_setting[s], batch, flops, peak_tflops, strongest_fastest)
                for s in TORCH_SETTINGS if by_setting[s]]
    ratio = results[0]["vs_strongest"]
    claim = (f"{name}, one training step (batch {m['batch']}, {m['patch']}x{m['patch']}, Adam, bf16) on "
             f"{meta['device']}: Plexus's CUDA-graph step at {ratio:.2f}x the images per second of PyTorch's "
             f"strongest setting ({STRONGEST_DESCRIPTION}), fastest round against fastest round.")
    return {"claim": claim, "device": meta["device"], "commit": meta["commit"], "command": meta["command"],
            "date": meta["date"], "model": name, "batch": m["batch"], "patch": m["patch"], "precision": "bf16",
            "flops_per_step": flops, "bf16_matmul_peak_tflops": round(peak_tflops, 1),
            "rounds": min(len(r["images_per_s"]) for r in results),
            "results": results,
            "notes": ("images_per_s: every round, in order; vs_strongest: this setting's fastest round over the "
                      "strongest setting's; tflops: flops_per_step * fastest images/s / batch; peak_fraction: of "
                      "bf16_matmul_peak_tflops, the fastest 8192^3 bf16 torch.matmul of the same run; "
                      "gpu_bound_images_per_s: batch over the GPU's busy time per step under torch.profiler.")}


def compact_json(doc):
    """`doc` as JSON with one line per top-level key and one per result row."""
    lines = []
    for key, value in doc.items():
        if key == "results":
            rows = ",\n".join("  " + json.dumps(row) for row in value)
            lines.append(f' "results": [\n{rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write(args):
    plexus_rows, torch_rows = read_lines(args.plexus), read_lines(args.torch)
    models = [m for m in read_cases(args.cases) if args.only in m["name"]]
    if not models:
        raise HeadlineError(f"no model of {args.cases} has '{args.only}' in its name")
    peak = measured_peak_tflops(torch_rows, args.torch)
    meta = {"device": args.device, "commit": args.commit, "command": args.command,
            "date": args.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    os.makedirs(args.out, exist_ok=True)
    written, failures = [], []
    for m in models:
        try:
            doc = model_result(m, plexus_rows, torch_rows, (args.plexus, args.torch), peak, meta)
        except HeadlineError as e:
            failures.append(str(e))
            continue
        with open(os.path.join(args.out, m["name"] + ".json"), "w") as f:
            f.write(compact_json(doc))
        written.append(doc)
    if written:
        print_table(written)
    for failure in failures:
        print(f"headline.py: {failure}", file=sys.stderr)
    return 1 if failures else 0


def grouped(number):
    """12024.4 -> '12,024'."""
    return f"{number:,.0f}"


def percent(fraction):
    return f"{100 * fraction:.0f}%"


def print_table(docs):
    """The markdown table of result files, one row per model, then a line saying what the numbers are."""
    print("| model | Plexus | PyTorch strongest | Plexus / strongest | torch.compile | PyTorch eager "
          "| GFLOP per step | Plexus TFLOP/s (of peak) | strongest TFLOP/s (of peak) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for doc in docs:
        rows = {r["setting"] if r["framework"] == "pytorch" else "plexus": r for r in doc["results"]}
        plexus, strongest = rows["plexus"], rows["strongest"]

        def rate(setting):
            return grouped(rows[setting]["images_per_s_fastest"]) if setting in rows else "-"

        print(f"| {doc['model']} | {rate('plexus')} | {rate('strongest')} | **{plexus['vs_strongest']:.2f}x** "
              f"| {rate('compile')} | {rate('eager')} | {doc['flops_per_step'] / 1e9:,.1f} "
              f"| {plexus['tflops']:.0f} ({percent(plexus['peak_fraction'])}) "
              f"| {strongest['tflops']:.0f} ({percent(strongest['peak_fraction'])}) |")

    def each(key):
        return ", ".join(sorted({str(doc[key]) for doc in docs}))

    peaks = ", ".join(sorted({f"{doc['bf16_matmul_peak_tflops']:.0f}" for doc in docs}))
    print(f"\nImages per second, the fastest of {each('rounds')} rounds of each setting, batch {each('batch')} of "
          f"{each('patch')}x{each('patch')} crops, bf16, {each('device')}, commit {each('commit')}. PyTorch "
          f"strongest: {STRONGEST_DESCRIPTION}. Peak: the fastest 8192^3 bf16 torch.matmul of the same run, "
          f"{peaks} TFLOP/s.")


def table(args):
    docs = []
    for path in args.files:
        doc = read_json(path)
        settings = {r.get("setting") for r in doc.get("results", [])}
        if "flops_per_step" not in doc or not {"cuda-graph", "strongest"} <= settings:
            raise HeadlineError(f"{path}: not a headline result (needs flops_per_step and the cuda-graph and "
                                "strongest rows)")
        docs.append(doc)
    print_table(docs)
    return 0


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command_name", required=True)
    w = sub.add_parser("write", help="write one result file per model and print the table")
    w.add_argument("--plexus", required=True, help="plexus-bench's JSON lines (every round, one --profile)")
    w.add_argument("--torch", required=True, help="torch_bench.py's JSON lines (every round)")
    w.add_argument("--cases", required=True, help="the cases file both ran (its models, batch and patch)")
    w.add_argument("--out", required=True, help="folder of the result files")
    w.add_argument("--device", required=True)
    w.add_argument("--commit", required=True)
    w.add_argument("--command", required=True, help="the command that made the run, from the repository root")
    w.add_argument("--date", default="", help="YYYY-MM-DD (default: today, UTC)")
    w.add_argument("--only", default="", help="only the models whose name contains this text (as the benchmarks')")
    t = sub.add_parser("table", help="print the table of result files")
    t.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.command_name == "write" and args.date:
        try:
            datetime.date.fromisoformat(args.date)
        except ValueError:
            ap.error(f"--date must be YYYY-MM-DD, got '{args.date}'")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        return write(args) if args.command_name == "write" else table(args)
    except HeadlineError as e:
        print(f"headline.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""perf: plexus-bench's rows of the chosen layers and models, with per-node profiles, kernel timelines,
Nsight Compute kernel times and plexus-ae train end to end on request."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from build import build, run_environment
from targets import ROOT

HIGHER_IS_FASTER = {"images_per_s", "ratio"}  # every other metric is a time


class Side:
    """One build to time: its plexus-bench, the tree its model specs come from, and its environment."""

    def __init__(self, label, build_dir, root, env):
        self.label, self.build_dir, self.root, self.env = label, build_dir, root, env

    def bench(self):
        return os.path.join(self.build_dir, "bin", "plexus-bench")


def write_cases(path, layers, models, comment):
    with open(path, "w") as f:
        json.dump({"comment": comment, "layers": layers, "models": models}, f, indent=1)
    return path


def bench_rows(args, side, cases_path, precision, log_path, extra=()):
    """plexus-bench's JSON rows for one side; appends its output to log_path; None when it failed."""
    command = [side.bench(), "--cases", cases_path, "--root", side.root, "--precision", precision] + list(extra)
    if args.warmup is not None:
        command += ["--warmup", str(args.warmup)]
    if args.repeats is not None:
        command += ["--repeats", str(args.repeats)]
    run = subprocess.run(command, capture_output=True, text=True, env=side.env)
    with open(log_path, "a") as log:
        log.write(run.stdout)
    if run.returncode != 0:
        print(f"{side.label}: plexus-bench failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
        return None
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def measurements(rows):
    """{(name, what): (value, unit)} of plexus-bench rows; peak memory apart: {name: MiB}."""
    values, peaks = {}, {}
    for row in rows:
        if row.get("kind") == "layer":
            values[(row["name"], "forward")] = (row["forward_ms"], "ms")
            values[(row["name"], "backward")] = (row["backward_ms"], "ms")
        elif row.get("kind") in ("train_step", "train_step_graph"):
            what = "graph step" if row["kind"] == "train_step_graph" else "eager step"
            values[(row["name"], what)] = (row["images_per_s"], "images_per_s")
            if "peak_bytes" in row:
                peaks[(row["name"], what)] = row["peak_bytes"] / 2**20
    return values, peaks


def format_value(value, unit):
    return {"images_per_s": f"{value:,.0f} img/s", "ratio": f"{value:.3f}"}.get(unit, f"{value:.3f} ms")


def profile_tables(args, sides, models, precision):
    """Each model's step per node, one side or two side by side (lab/bench/profile_table.py)."""
    ok = True
    for model in models:
        files = []
        for side in sides:
            cases = write_cases(os.path.join(args.logs, f"cases-{model['name']}.json"), [], [model], "one model")
            path = os.path.join(args.logs, f"profile-{slug(side.label)}-{model['name']}-{precision}.jsonl")
            open(path, "w").close()
            ok &= bench_rows(args, side, cases, precision, path, ["--profile"]) is not None
            files.append(path)
        print(f"== {model['name']} per node ({precision}): {' | '.join(s.label for s in sides)}", flush=True)
        ok &= subprocess.run([sys.executable, os.path.join(ROOT, "lab", "bench", "profile_table.py")] + files
                             ).returncode == 0
    return ok


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-")


def run_perf(args):
    layers, models = args.targets["layers"], args.targets["models"]
    if not args.no_build:
        build(args, ROOT, args.build, ["plexus-bench"] + (["plexus-ae"] if args.data else []), args.logs)
    side = Side("this build", args.build, ROOT, run_environment(args))
    cases = write_cases(os.path.join(args.logs, "cases.json"), layers, models, "the cases of a harness perf run")
    ok = True
    for precision in args.precisions:
        path = os.path.join(args.logs, f"perf-{precision}.jsonl")
        open(path, "w").close()
        rows = bench_rows(args, side, cases, precision, path)
        if rows is None:
            ok = False
            continue
        values, peaks = measurements(rows)
        print(f"== {precision}")
        for (name, what), (value, unit) in values.items():
            peak = f"   peak {peaks[(name, what)]:,.0f} MiB" if (name, what) in peaks else ""
            print(f"{name:44} {what:11} {format_value(value, unit):>16}{peak}")
        if args.profile:
            ok &= profile_tables(args, [side], models, precision)
        for model in models:
            one = write_cases(os.path.join(args.logs, f"cases-{model['name']}.json"), [], [model], "one model")
            if args.timeline:
                ok &= timeline(args, side, model["name"], one, precision)
            if args.kernels:
                ok &= kernels(args, side, model["name"], one, precision)
            if args.data:
                graph = values.get((model["name"], "graph step"), (0, ""))[0]
                ok &= train_end_to_end(args, model["name"], precision, graph)
    print(f"SUMMARY: perf {'done' if ok else 'FAILED'} (rows: {args.logs}/perf-*.jsonl)")
    return 0 if ok else 1


def timeline(args, side, model, cases, precision):
    path = os.path.join(args.logs, f"timeline-{model}-{precision}.jsonl")
    print(f"== {model}: the replayed step's kernels ({precision})", flush=True)
    if bench_rows(args, side, cases, precision, os.path.join(args.logs, "timeline-steps.jsonl"),
                  ["--timeline", path]) is None:
        return False
    return subprocess.run([sys.executable, os.path.join(ROOT, "lab", "bench", "timeline_table.py"), path]
                          ).returncode == 0


def kernels(args, side, model, cases, precision):
    """Every kernel of one step under Nsight Compute, each timed alone (clocks not locked)."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    path = os.path.join(args.logs, f"kernels-{model}-{precision}.csv")
    print(f"== {model}: every kernel of one step under Nsight Compute ({precision})", flush=True)
    command = [ncu, "--clock-control", "none", "--cache-control", "all", "--metrics", "gpu__time_duration.sum",
               "-c", "1500", "--csv", side.bench(), "--cases", cases, "--root", side.root, "--precision", precision,
               "--warmup", "0", "--repeats", "1"]
    with open(path, "w") as out:
        if subprocess.run(command, stdout=out, stderr=subprocess.DEVNULL, env=side.env).returncode != 0:
            print(f"ncu failed: {path}")
            return False
    return subprocess.run([sys.executable, os.path.join(ROOT, "lab", "bench", "step_kernels.py"), path]
                          ).returncode == 0


def train_end_to_end(args, model, precision, graph_rate):
    """plexus-ae train for --seconds on --data: the mean images/s of its log windows but the first and the last,
    against the benchmarked CUDA-graph step, and how long each window waited for the loader."""
    run_dir = os.path.join(args.logs, f"train-{model}-{precision}")
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [os.path.join(args.build, "bin", "plexus-ae"), "train", "--data", os.path.abspath(args.data),
               "--model", model, "--batch", "16", "--patch", "256", "--precision", precision, "--steps", "1000000",
               "--time-limit", str(args.seconds), "--log-every", "50", "--checkpoint-every", "0", "--out", run_dir]
    with open(run_dir + ".log", "w") as log:
        rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=run_environment(args)).returncode
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"train"' in line]
    except OSError:
        rows = []
    if rc != 0 or not rows:
        print(f"train {model}: FAILED (exit {rc}; log {run_dir}.log)")
        return False
    steady = rows[1:-1] or rows
    rate = statistics.mean(r["images_per_second"] for r in steady)
    wait = statistics.mean(r.get("loader_wait_seconds", 0) for r in steady)
    share = f" = {100 * rate / graph_rate:.0f}% of the graph step" if graph_rate else ""
    print(f"train {model} end to end: {rate:,.0f} img/s over {len(steady)} windows{share}; loader wait "
          f"{1000 * wait:.1f} ms per 50-step window; last loss {rows[-1]['loss']:.3f}")
    return True

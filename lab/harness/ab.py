"""ab: the same benchmark rows from two sides (another build, tree or revision; or an environment setting),
rounds alternating which side goes first."""
import json
import os
import re
import shutil
import statistics
import subprocess

from build import build, run_environment
from perf import HIGHER_IS_FASTER, Side, bench_rows, format_value, measurements, profile_tables, slug, write_cases
from targets import ROOT, UsageError


def speed_ratio(a, b, unit):
    """How much faster B is than A (above 1: B faster)."""
    if not a or not b:
        return float("nan")
    return b / a if unit in HIGHER_IS_FASTER else a / b


def against_side(args):
    """Side A of ab --against and the source tree to build it from (None: use it as it is): a build folder
    (its CMakeCache.txt names its tree), a folder holding bin/plexus-bench, a source tree or a git revision."""
    target = args.against
    label = f"A ({target})"
    if os.path.isfile(os.path.join(target, "CMakeCache.txt")):
        root = source_of_build(target)
        return Side(label, os.path.abspath(target), root or ROOT, run_environment(args)), root
    if os.path.isfile(os.path.join(target, "bin", "plexus-bench")):
        return Side(label, os.path.abspath(target), ROOT, run_environment(args)), None
    if os.path.isfile(os.path.join(target, "CMakeLists.txt")):
        root = os.path.abspath(target)
    else:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", target + "^{commit}"],
                             capture_output=True, text=True)
        if rev.returncode != 0:
            raise UsageError(f"--against '{target}' is neither a build folder, a source tree nor a git revision")
        sha = rev.stdout.strip()
        root = args.build.rstrip("/") + "-against-src"
        marker = os.path.join(root, ".harness-revision")
        if not (os.path.isfile(marker) and open(marker).read().strip() == sha):
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            archive = subprocess.Popen(["git", "-C", ROOT, "archive", sha], stdout=subprocess.PIPE)
            # -m: the files get the time of the export, not of the commit, so that a build folder made from
            # another revision before rebuilds them.
            if subprocess.run(["tar", "-x", "-m", "-C", root], stdin=archive.stdout).returncode != 0 or archive.wait():
                raise RuntimeError(f"could not export revision {target} into {root}")
            with open(marker, "w") as f:
                f.write(sha + "\n")
        label = f"A ({target} = {sha[:10]})"
    return Side(label, args.build.rstrip("/") + "-against", root, run_environment(args)), root


def source_of_build(build_dir):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            found = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", f.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def scaling_values(args, side, log_dir):
    """lab/experiments/ddp-scaling.sh run with this side's plexus-ae: {(model, what): (value, unit)} of its rows,
    the images/s of each --gpus count and its ratio to as many single processes (vs_one_process)."""
    env = dict(side.env, OUT=log_dir, BUILD=side.build_dir,
               MODELS=" ".join(m["name"] for m in args.targets["models"]))
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, "run.log"), "w") as log:
        script = os.path.join(ROOT, "lab", "experiments", "ddp-scaling.sh")
        subprocess.run(["bash", script, os.path.abspath(args.scaling), str(args.steps)], stdout=log,
                       stderr=subprocess.STDOUT, env=env)
    values = {}
    try:
        with open(os.path.join(log_dir, "scaling.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        rows = []
    for row in rows:
        values[(row["model"], f"--gpus {row['gpus']}")] = (row["images_per_second"], "images_per_s")
        if row.get("vs_one_process") is not None:
            values[(row["model"], f"{row['gpus']} GPUs vs 1")] = (row["vs_one_process"], "ratio")
    return values


def run_ab(args):
    layers, models = args.targets["layers"], args.targets["models"]
    program = "plexus-ae" if args.scaling else "plexus-bench"
    if args.switch:
        name, value = args.switch
        a = Side(f"A (without {name})", args.build, ROOT, run_environment(args, without=[name]))
        b = Side(f"B ({name}={value})", args.build, ROOT, run_environment(args, {name: value}))
        a_root = None
    else:
        a, a_root = against_side(args)
        b = Side("B (this build)", args.build, ROOT, run_environment(args))
    if not args.no_build:
        build(args, ROOT, args.build, [program], args.logs)
        if a_root:
            build(args, a_root, a.build_dir, [program], os.path.join(args.logs, "against"), a.label)
    for side in (a, b):
        if not os.access(os.path.join(side.build_dir, "bin", program), os.X_OK):
            print(f"SUMMARY: ab FAILED: no {program} in {side.build_dir} ({side.label})")
            return 1
    cases = write_cases(os.path.join(args.logs, "cases.json"), layers, models, "the cases of a harness ab run")
    ok = True
    for precision in ["scaling"] if args.scaling else args.precisions:
        rounds = {a.label: [], b.label: []}  # per side, one {measurement: value} per round
        peaks = {a.label: {}, b.label: {}}
        for r in range(1, args.rounds + 1):
            order = (a, b) if r % 2 else (b, a)
            for side in order:
                path = os.path.join(args.logs, f"ab-{slug(side.label)}-{precision}-round{r}")
                if args.scaling:
                    values, side_peaks = scaling_values(args, side, path), {}
                    ok &= bool(values)
                else:
                    open(path + ".jsonl", "w").close()
                    rows = bench_rows(args, side, cases, precision, path + ".jsonl")
                    ok &= rows is not None
                    values, side_peaks = measurements(rows or [])
                rounds[side.label].append(values)
                peaks[side.label].update(side_peaks)
            print(f"round {r} ({precision}): {order[0].label} first", flush=True)
        print_ab_table(a.label, b.label, rounds, peaks, precision)
        if args.profile:
            ok &= profile_tables(args, [a, b], models, precision)
    print(f"SUMMARY: ab {'done' if ok else 'FAILED'}: {args.rounds} rounds, B/A above 1: B faster "
          f"(rows: {args.logs}/ab-*)")
    return 0 if ok else 1


def print_ab_table(a, b, rounds, peaks, precision):
    keys = [k for r in rounds[a] + rounds[b] for k in r]
    keys = [k for i, k in enumerate(keys) if k not in keys[:i]]
    print(f"== {precision}: A = {a}, B = {b}; medians and fastest of {len(rounds[a])} rounds")
    print(f"{'case':44} {'':11} {'A median':>16} {'B median':>16} {'B/A':>7} {'A fastest':>16} {'B fastest':>16}"
          f" {'B/A':>7}")
    for key in keys:
        unit = next(r[key][1] for r in rounds[a] + rounds[b] if key in r)
        va = [r[key][0] for r in rounds[a] if key in r]
        vb = [r[key][0] for r in rounds[b] if key in r]
        best = max if unit in HIGHER_IS_FASTER else min
        ma, mb = (statistics.median(v) if v else float("nan") for v in (va, vb))
        fa, fb = (best(v) if v else float("nan") for v in (va, vb))
        print(f"{key[0]:44} {key[1]:11} {format_value(ma, unit):>16} {format_value(mb, unit):>16} "
              f"{speed_ratio(ma, mb, unit):7.3f} {format_value(fa, unit):>16} {format_value(fb, unit):>16} "
              f"{speed_ratio(fa, fb, unit):7.3f}")
        each = lambda values: ", ".join(format_value(v, unit) for v in values)
        print(f"{'':56} every round: A {each(va)}; B {each(vb)}")
        if key in peaks[a] or key in peaks[b]:
            print(f"{'':56} peak memory: A {peaks[a].get(key, 0):,.0f} MiB, B {peaks[b].get(key, 0):,.0f} MiB")

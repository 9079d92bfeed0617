#!/usr/bin/env python3
"""The lab's harness: a layer's or a model's checks and timings on a GPU, in one command.

  python3 lab/harness.py MODE... TARGET... [options]      (from anywhere; python3's standard library only)

Modes (test and grad may be given together):
  test   the layer's tests but its gradient checks: definitions, CPU/CUDA parity, the CUDA kernels against
         f64 references (the test binary tests/layers/<folder>_test of the layer's folder layers/<folder>/)
  grad   its gradient checks: f64 central differences on the CPU and on CUDA (tests named Gradients*,
         *GradientsCpu*, *GradientsCuda* or *CentralDifferences*)
  perf   plexus-bench timings: a layer's rows of lab/bench/bench_cases.json, a model's training step
         (eager and CUDA graph, with peak memory)
  ab     perf of this build (B) against another (A: --against) or against an environment setting
         (A: as given, B: with --switch VAR=VALUE), ROUNDS rounds alternating which side goes first;
         prints every round, the medians, the fastest and the ratio B/A (above 1: B is faster)
  list   the targets: layer types with their test binaries, models, benchmark cases

Targets: a layer type (Conv2d, GDN, ...; `layers`: every registered one), a test binary of tests/
(net_parity_test, codec_test, ...: test and grad run its tests), a bundled model (bls2017, ...;
`models`: every one in lab/bench/bench_cases.json; perf and ab only).

A CUDA test may not skip (with one GPU visible, the tests named *TwoGpu* may); --cpu leaves the CUDA
tests out instead, for a machine without a GPU. The build goes to --build (default
/tmp/plexus-harness/build), configured with -DPLEXUS_BUILD_BENCH=ON; logs go to --logs.
Exit status: 0 passed, 1 a check or a build failed, 2 bad arguments (named).
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("test", "grad", "perf", "ab", "list")
# The gradient checks, by the tests' naming convention (GoogleTest patterns on Suite.Name).
GRAD_PATTERNS = ("*.Gradients*", "*.*GradientsCpu*", "*.*GradientsCuda*", "*.*CentralDifferences*")
CUDA_PATTERN = "*Cuda*"  # the tests that need a GPU, by convention
TWO_GPU_PATTERN = "*TwoGpu*"  # the tests that need two GPUs
HIGHER_IS_FASTER = {"images_per_s"}  # every other metric is a time


class UsageError(Exception):
    """A bad argument: the message names it; the harness exits with status 2."""


# ---- what there is: layers, test binaries, benchmark cases ----

def layer_folders(root=ROOT):
    """{layer type: its folder under layers/}, from the registrations (registry.add("Type", ...))."""
    types = {}
    for path in sorted(glob.glob(os.path.join(root, "layers", "*", "*.cpp"))):
        with open(path, encoding="utf-8") as source:
            for name in re.findall(r'registry\.add\(\s*"([A-Za-z0-9_]+)"', source.read()):
                types[name] = os.path.basename(os.path.dirname(path))
    return types


def test_sources(root=ROOT):
    """{test binary: its source}, one GoogleTest binary per tests/**/*_test.cpp."""
    sources = {}
    for path in glob.glob(os.path.join(root, "tests", "**", "*_test.cpp"), recursive=True):
        sources[os.path.basename(path)[:-len(".cpp")]] = path
    return sources


def layer_binary(layer_type, folders, sources):
    """The test binary of a layer type: <folder>_test of its folder layers/<folder>/."""
    binary = folders[layer_type] + "_test"
    if binary not in sources:
        raise UsageError(f"layer type '{layer_type}' has no test binary: no tests/layers/{binary}.cpp")
    return binary


def bench_cases(root=ROOT):
    with open(os.path.join(root, "lab", "bench", "bench_cases.json"), encoding="utf-8") as f:
        return json.load(f)


def is_grad(test):
    return any(fnmatch.fnmatchcase(test, p) for p in GRAD_PATTERNS)


def select_tests(tests, mode, user_filter=None, cpu_only=False):
    """The tests of a binary a mode runs: grad its gradient checks, test the others; --filter narrows
    (GoogleTest's syntax: POSITIVE[:...][-NEGATIVE[:...]]); --cpu leaves the CUDA tests out."""
    chosen = [t for t in tests if is_grad(t) == (mode == "grad")]
    if user_filter:
        chosen = [t for t in chosen if matches_gtest_filter(t, user_filter)]
    if cpu_only:
        chosen = [t for t in chosen if not fnmatch.fnmatchcase(t, CUDA_PATTERN)]
    return chosen


def matches_gtest_filter(test, gtest_filter):
    positive, _, negative = gtest_filter.partition("-")
    positives = [p for p in positive.split(":") if p] or ["*"]
    return (any(fnmatch.fnmatchcase(test, p) for p in positives) and
            not any(fnmatch.fnmatchcase(test, p) for p in negative.split(":") if p))


def listed_tests(binary, env):
    """Suite.Name of every test of a GoogleTest binary (--gtest_list_tests)."""
    run = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True, env=env, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"{binary} --gtest_list_tests failed (exit {run.returncode}): {run.stderr.strip()}")
    tests, suite = [], None
    for line in run.stdout.splitlines():
        if not line.strip() or line.startswith("Running main()"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif suite:
            tests.append(suite + line.split("#")[0].strip())
    return tests


def visible_gpus():
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return len([d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    try:
        run = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([line for line in run.stdout.splitlines() if line.strip()]) if run.returncode == 0 else 0


# ---- arguments ----

def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="lab/harness.py", description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python3 lab/harness.py test grad GDN --memcheck\n"
               "  python3 lab/harness.py test grad layers --cpu                 # no GPU needed\n"
               "  python3 lab/harness.py test Conv2d --filter '*TensorCore*' --env PLEXUS_CONV_WGMMA=0\n"
               "  python3 lab/harness.py perf GDN IGDN --precision f32,tf32\n"
               "  python3 lab/harness.py perf bmshj2018-factorized --profile --timeline\n"
               "  python3 lab/harness.py ab models --switch PLEXUS_FUSE_ACTIVATIONS=0 --rounds 3\n"
               "  python3 lab/harness.py ab bls2017 bmshj2018-hyperprior --against HEAD~1 --profile")
    parser.add_argument("words", nargs="*", metavar="MODE|TARGET", help="modes, then targets")
    parser.add_argument("--build", default="/tmp/plexus-harness/build", help="build folder (default: %(default)s)")
    parser.add_argument("--no-build", action="store_true", help="use --build as it is (and --against's build)")
    parser.add_argument("--logs", default="/tmp/plexus-harness/logs", help="log folder (default: %(default)s)")
    parser.add_argument("--cmake-arg", action="append", default=[], metavar="ARG",
                        help="one more configure argument, e.g. -DCMAKE_CUDA_ARCHITECTURES=90 (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="build jobs (default: the cores)")
    parser.add_argument("--env", action="append", default=[], metavar="VAR=VALUE",
                        help="set for every test and benchmark run, both sides of ab (repeatable)")
    parser.add_argument("--filter", help="test, grad: narrow the tests (GoogleTest filter, e.g. '*TensorCore*')")
    parser.add_argument("--cpu", action="store_true", help="test, grad: leave the CUDA tests out (no GPU needed)")
    parser.add_argument("--memcheck", action="store_true",
                        help="test, grad: also run the selected CUDA tests under compute-sanitizer memcheck")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a test binary may run (default: 900)")
    parser.add_argument("--precision", default="bf16", help="perf, ab: f32, tf32 or bf16, or several with commas "
                        "(default: bf16)")
    parser.add_argument("--warmup", type=int, help="perf, ab: plexus-bench's untimed runs")
    parser.add_argument("--repeats", type=int, help="perf, ab: plexus-bench's timed runs (the median)")
    parser.add_argument("--profile", action="store_true", help="perf, ab: each model's step per node "
                        "(lab/bench/profile_table.py; ab: both sides side by side)")
    parser.add_argument("--timeline", action="store_true",
                        help="perf: each model's replayed step kernel by kernel (lab/bench/timeline_table.py)")
    parser.add_argument("--kernels", action="store_true", help="perf: every kernel of each model's step under "
                        "Nsight Compute, by kind (lab/bench/step_kernels.py)")
    parser.add_argument("--data", metavar="IMAGE_FOLDER",
                        help="perf: also plexus-ae train end to end on these images for each model")
    parser.add_argument("--seconds", type=int, default=30, help="perf --data: seconds of training (default: 30)")
    parser.add_argument("--rounds", type=int, default=3, help="ab: rounds (default: 3)")
    parser.add_argument("--against", metavar="DIR|REV",
                        help="ab: side A is this build folder, source tree (built into BUILD-against) or git "
                             "revision (exported to BUILD-against-src)")
    parser.add_argument("--switch", metavar="VAR=VALUE", help="ab: side B runs with VAR=VALUE, side A without VAR")
    args = parser.parse_args(argv)
    try:
        check_arguments(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"lab/harness.py: {e}", file=sys.stderr)
        sys.exit(2)
    return args


def environment_setting(text, option):
    name, equals, value = text.partition("=")
    if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"{option} takes VAR=VALUE, got '{text}'")
    return name, value


def check_arguments(args):
    args.modes = []
    targets = []
    for word in args.words:
        (targets if targets or word not in MODES else args.modes).append(word)
    if not args.modes:
        raise UsageError(f"name a mode first ({', '.join(MODES)}), got '{args.words[0]}'" if args.words
                         else f"name a mode ({', '.join(MODES)})")
    if len(set(args.modes)) != len(args.modes):
        raise UsageError(f"a mode given twice: {' '.join(args.modes)}")
    if len(args.modes) > 1 and set(args.modes) != {"test", "grad"}:
        raise UsageError(f"only test and grad go together, got {' '.join(args.modes)}")
    mode = args.modes[0]
    if mode != "list" and not targets:
        raise UsageError(f"{mode}: name a target (a layer type, `layers`, a test binary, a model or `models`)")
    args.env = dict(environment_setting(e, "--env") for e in args.env)
    testing, timing = mode in ("test", "grad"), mode in ("perf", "ab")

    def only(option, allowed, given):
        if given and mode not in allowed:
            raise UsageError(f"{option} is for {' and '.join(allowed)}, not {mode}")
    only("--filter", ("test", "grad"), args.filter)
    only("--cpu", ("test", "grad"), args.cpu)
    only("--memcheck", ("test", "grad"), args.memcheck)
    only("--profile", ("perf", "ab"), args.profile)
    only("--timeline", ("perf",), args.timeline)
    only("--kernels", ("perf",), args.kernels)
    only("--data", ("perf",), args.data)
    only("--against", ("ab",), args.against)
    only("--switch", ("ab",), args.switch)
    if args.cpu and args.memcheck:
        raise UsageError("--memcheck runs the CUDA tests, which --cpu leaves out")
    for option, value, low in (("--rounds", args.rounds, 1), ("--jobs", args.jobs, 1), ("--timeout", args.timeout, 1),
                               ("--seconds", args.seconds, 1), ("--warmup", args.warmup, 0),
                               ("--repeats", args.repeats, 1)):
        if value is not None and value < low:
            raise UsageError(f"{option} must be at least {low}, got {value}")
    args.precisions = args.precision.split(",")
    for p in args.precisions:
        if p not in ("f32", "tf32", "bf16"):
            raise UsageError(f"--precision: unknown precision '{p}' (f32, tf32, bf16)")
    if mode == "ab":
        if bool(args.against) == bool(args.switch):
            raise UsageError("ab needs exactly one of --against DIR|REV and --switch VAR=VALUE")
        if args.switch:
            args.switch = environment_setting(args.switch, "--switch")
    if args.data and not os.path.isdir(args.data):
        raise UsageError(f"--data: no folder '{args.data}'")
    args.targets = resolve_targets(targets, testing, timing)
    if (args.profile or args.timeline or args.kernels or args.data) and not args.targets["models"]:
        raise UsageError("--profile, --timeline, --kernels and --data time models' steps: name a model")


def resolve_targets(targets, testing, timing):
    """test/grad: {binaries: [names]}; perf/ab: {layers: [cases], models: [cases]}."""
    folders, sources, cases = layer_folders(), test_sources(), bench_cases()
    model_names = [m["name"] for m in cases["models"]]
    binaries, layer_cases, model_cases = [], [], []
    for target in targets:
        types = sorted(folders) if target == "layers" else [target] if target in folders else []
        if target == "models" or target in model_names:
            if not timing:
                raise UsageError(f"'{target}' is a model: test and grad take layer types and test binaries "
                                 "(a model's tests: name their binaries, e.g. hyperprior_model_test)")
            model_cases += [m for m in cases["models"] if target in ("models", m["name"])]
        elif types and testing:
            binaries += [layer_binary(t, folders, sources) for t in types]
        elif types:
            found = [c for c in cases["layers"] if c["type"] in types]
            if not found and target != "layers":
                have = sorted({c["type"] for c in cases["layers"]})
                raise UsageError(f"layer type '{target}' has no case in lab/bench/bench_cases.json "
                                 f"(types with cases: {', '.join(have)})")
            layer_cases += found
        elif target in sources and testing:
            binaries.append(target)
        elif target in sources:
            raise UsageError(f"'{target}' is a test binary: perf and ab take layer types and models")
        else:
            raise UsageError(f"unknown target '{target}': not a layer type ({', '.join(sorted(folders))}), "
                             f"a test binary of tests/, or a model ({', '.join(model_names)})")
    unique = lambda items: [x for i, x in enumerate(items) if x not in items[:i]]
    return {"binaries": unique(binaries), "layers": unique(layer_cases), "models": unique(model_cases)}


# ---- building ----

def build(args, root, build_dir, targets, logs, label="this tree"):
    """Configures build_dir from root (a new folder: Release, Ninja) and builds the targets; exits 1 on failure."""
    os.makedirs(logs, exist_ok=True)
    configure = ["cmake", "-S", root, "-B", build_dir, "-DPLEXUS_BUILD_BENCH=ON"] + args.cmake_arg
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        configure += ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"]
    log_path = os.path.join(logs, "build.log")
    started = time.time()
    with open(log_path, "w") as log:
        ok = (subprocess.run(configure, stdout=log, stderr=subprocess.STDOUT).returncode == 0 and
              subprocess.run(["cmake", "--build", build_dir, "-j", str(args.jobs), "--target"] + targets,
                             stdout=log, stderr=subprocess.STDOUT).returncode == 0)
    if not ok:
        with open(log_path) as log:
            print("".join(log.readlines()[-40:]))
        print(f"SUMMARY: build of {label} FAILED (log: {log_path})")
        sys.exit(1)
    print(f"built {label} in {time.time() - started:.0f} s: {' '.join(targets)}")


def run_environment(args, extra=None, without=()):
    """The environment of a run: this process's, less `without`, then --env, then `extra`."""
    env = dict(os.environ)
    for name in without:
        env.pop(name, None)
    env.update(args.env)
    env.update(extra or {})
    return env


# ---- test and grad ----

def parse_gtest_output(text):
    """The tests that passed, failed and skipped, from a GoogleTest run's output."""
    found = {"passed": set(), "failed": set(), "skipped": set()}
    for tag, kind in (("       OK ", "passed"), ("  FAILED  ", "failed"), ("  SKIPPED ", "skipped")):
        for name in re.findall(r"^\[" + tag + r"\] ([A-Za-z0-9_/]+\.[A-Za-z0-9_/]+)", text, re.M):
            found[kind].add(name)
    found["passed"] -= found["failed"] | found["skipped"]
    return found


def text_of(output):
    """A timed-out run's output so far (bytes or text, or None)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def run_binary(args, binary, mode, logs, gpus):
    """Runs one binary's tests of a mode; returns (ok, line)."""
    path = os.path.join(args.build, "tests", binary)
    if not os.access(path, os.X_OK):
        return False, f"{binary} {mode}: FAILED: no {path}"
    env = run_environment(args)
    try:
        selected = select_tests(listed_tests(path, env), mode, args.filter, args.cpu)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return False, f"{binary} {mode}: FAILED: {e}"
    if not selected:
        return False, f"{binary} {mode}: FAILED: no test selected (mode {mode}, filter {args.filter or 'none'}" \
                      f"{', CUDA tests left out' if args.cpu else ''})"
    log_path = os.path.join(logs, f"{binary}-{mode}.log")
    started = time.time()
    try:
        run = subprocess.run([path, "--gtest_filter=" + ":".join(selected)], capture_output=True, text=True, env=env,
                             timeout=args.timeout)
        output, rc = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as e:
        output, rc = f"{text_of(e.stdout)}\ntimed out after {args.timeout} s", 124
    with open(log_path, "w") as log:
        log.write(output)
    found = parse_gtest_output(output)
    allowed = {t for t in found["skipped"] if gpus < 2 and fnmatch.fnmatchcase(t, TWO_GPU_PATTERN)}
    bad_skips = sorted(found["skipped"] - allowed)
    missing = sorted(set(selected) - found["passed"] - found["failed"] - found["skipped"])
    ok = rc == 0 and not found["failed"] and not bad_skips and not missing
    line = (f"{binary} {mode}: {'passed' if ok else 'FAILED'}: {len(found['passed'])} of {len(selected)} passed, "
            f"{len(found['failed'])} failed, {len(found['skipped'])} skipped"
            f"{f' ({len(allowed)} two-GPU tests with one GPU visible)' if allowed else ''}"
            f" ({time.time() - started:.0f} s, exit {rc})")
    for name in sorted(found["failed"]):
        line += f"\n    failed: {name}"
    for name in bad_skips:
        line += f"\n    skipped: {name} (a test may not skip{'; --cpu leaves CUDA tests out' if not args.cpu else ''})"
    for name in missing:
        line += f"\n    did not run: {name}"
    if not ok:
        line += f"\n    log: {log_path}"
    if args.memcheck and ok:
        memcheck_ok, memcheck_line = run_memcheck(args, path, binary, mode, selected, logs, env)
        ok, line = memcheck_ok, line + "\n" + memcheck_line
    return ok, line


def compute_sanitizer():
    found = shutil.which("compute-sanitizer")
    return found or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "compute-sanitizer")


def nccl_probe_reports(text):
    """memcheck's reports of NCCL reading the attributes of its kernels that have no code for this GPU
    (cudaFuncGetAttributes failing with cudaErrorNoKernelImageForDevice, an error NCCL ignores): the reports
    of that error whose first host frame below the driver is in libnccl."""
    count, probe = 0, False
    for line in text.splitlines():
        if re.search(r"Program hit cudaErrorNoKernelImageForDevice .* cudaFuncGetAttributes", line):
            probe = True
        elif probe and "Host Frame:" in line and "in libcuda.so" not in line:
            count += "in libnccl.so" in line
            probe = False
    return count


def run_memcheck(args, path, binary, mode, selected, logs, env):
    """compute-sanitizer memcheck over the selected CUDA tests; (ok, line)."""
    cuda_tests = [t for t in selected if fnmatch.fnmatchcase(t, CUDA_PATTERN)]
    if not cuda_tests:
        return True, f"    memcheck: no CUDA test among them"
    log_path = os.path.join(logs, f"{binary}-{mode}-memcheck.log")
    command = [compute_sanitizer(), "--tool", "memcheck", "--error-exitcode", "99", path,
               "--gtest_filter=" + ":".join(cuda_tests)]
    try:
        run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=4 * args.timeout)
        output, rc = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as e:
        output, rc = f"{text_of(e.stdout)}\ntimed out after {4 * args.timeout} s", 124
    except OSError as e:
        output, rc = str(e), 127
    with open(log_path, "w") as log:
        log.write(output)
    summary = (re.findall(r"ERROR SUMMARY: \d+ errors?", output) or ["no ERROR SUMMARY"])[-1]
    errors = int((re.findall(r"ERROR SUMMARY: (\d+)", output) or ["0"])[-1])
    probes, note = nccl_probe_reports(output), ""
    passed = not parse_gtest_output(output)["failed"] and re.search(r"^\[  PASSED  \]", output, re.M)
    if rc == 99 and errors and probes == errors and passed:
        rc, note = 0, f" (all {probes} of them NCCL's probes of its own kernels, not counted)"
    ok = rc == 0
    return ok, (f"    memcheck over {len(cuda_tests)} CUDA tests: {'clean' if ok else 'FAILED'}: {summary}{note}"
                f" (exit {rc}){'' if ok else f'; log: {log_path}'}")


def run_tests(args):
    binaries = args.targets["binaries"]
    if not args.no_build:
        build(args, ROOT, args.build, binaries, args.logs)
    gpus = visible_gpus()
    failed = 0
    for binary in binaries:
        for mode in args.modes:
            ok, line = run_binary(args, binary, mode, args.logs, gpus)
            print(line, flush=True)
            failed += not ok
    runs = len(binaries) * len(args.modes)
    setting = "".join(f" {k}={v}" for k, v in args.env.items())
    print(f"SUMMARY: {' and '.join(args.modes)}{setting}{' (CPU only)' if args.cpu else ''}"
          f"{' with memcheck' if args.memcheck else ''}: {runs - failed} of {runs} passed")
    return 1 if failed else 0


# ---- perf and ab ----

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
    return f"{value:,.0f} img/s" if unit == "images_per_s" else f"{value:.3f} ms"


def speed_ratio(a, b, unit):
    """How much faster B is than A (above 1: B faster)."""
    if not a or not b:
        return float("nan")
    return b / a if unit in HIGHER_IS_FASTER else a / b


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
    cases = write_cases(os.path.join(args.logs, "cases.json"), layers, models, "the cases of lab/harness.py perf")
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
            if subprocess.run(["tar", "-x", "-C", root], stdin=archive.stdout).returncode != 0 or archive.wait():
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


def run_ab(args):
    layers, models = args.targets["layers"], args.targets["models"]
    if args.switch:
        name, value = args.switch
        a = Side(f"A (without {name})", args.build, ROOT, run_environment(args, without=[name]))
        b = Side(f"B ({name}={value})", args.build, ROOT, run_environment(args, {name: value}))
        a_root = None
    else:
        a, a_root = against_side(args)
        b = Side("B (this build)", args.build, ROOT, run_environment(args))
    if not args.no_build:
        build(args, ROOT, args.build, ["plexus-bench"], args.logs)
        if a_root:
            build(args, a_root, a.build_dir, ["plexus-bench"], os.path.join(args.logs, "against"), a.label)
    for side in (a, b):
        if not os.access(side.bench(), os.X_OK):
            print(f"SUMMARY: ab FAILED: no plexus-bench in {side.build_dir} ({side.label})")
            return 1
    cases = write_cases(os.path.join(args.logs, "cases.json"), layers, models, "the cases of lab/harness.py ab")
    ok = True
    for precision in args.precisions:
        rounds = {a.label: [], b.label: []}  # per side, one {measurement: value} per round
        peaks = {a.label: {}, b.label: {}}
        for r in range(1, args.rounds + 1):
            order = (a, b) if r % 2 else (b, a)
            for side in order:
                path = os.path.join(args.logs, f"ab-{slug(side.label)}-{precision}-round{r}.jsonl")
                open(path, "w").close()
                rows = bench_rows(args, side, cases, precision, path)
                ok &= rows is not None
                values, side_peaks = measurements(rows or [])
                rounds[side.label].append(values)
                peaks[side.label].update(side_peaks)
            print(f"round {r} ({precision}): {order[0].label} first", flush=True)
        print_ab_table(a.label, b.label, rounds, peaks, precision)
        if args.profile:
            ok &= profile_tables(args, [a, b], models, precision)
    print(f"SUMMARY: ab {'done' if ok else 'FAILED'}: {args.rounds} rounds, B/A above 1: B faster "
          f"(rows: {args.logs}/ab-*.jsonl)")
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


# ---- list ----

def run_list(args):
    folders, sources, cases = layer_folders(), test_sources(), bench_cases()
    print("layer types (test, grad: the test binary; perf, ab: the benchmark cases):")
    for layer_type in sorted(folders):
        binary = folders[layer_type] + "_test"
        count = sum(c["type"] == layer_type for c in cases["layers"])
        print(f"  {layer_type:24} {binary if binary in sources else '(no test binary)':32} {count} benchmark cases")
    print("models (perf, ab):")
    for model in cases["models"]:
        print(f"  {model['name']}")
    print(f"test binaries (test, grad): {len(sources)} in tests/, e.g. {', '.join(sorted(sources)[:4])}, ...")
    return 0


def main(argv=None):
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    args.build, args.logs = os.path.abspath(args.build), os.path.abspath(args.logs)
    os.makedirs(args.logs, exist_ok=True)
    mode = args.modes[0]
    try:
        if mode == "list":
            return run_list(args)
        if mode in ("test", "grad"):
            return run_tests(args)
        return run_perf(args) if mode == "perf" else run_ab(args)
    except UsageError as e:
        print(f"lab/harness.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

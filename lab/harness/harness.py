#!/usr/bin/env python3
"""The lab's harness: a layer's or a model's checks and timings on a GPU, in one command.

  python3 lab/harness/harness.py MODE... TARGET... [options]      (from anywhere; python3's standard library only)

Modes (test and grad may be given together):
  test   the layer's tests but its gradient checks: definitions, CPU/CUDA parity, the CUDA kernels against
         f64 references (the test binary tests/layers/<folder>_test of the layer's folder layers/<folder>/)
  grad   its gradient checks: f64 central differences on the CPU and on CUDA (tests named Gradients*,
         *GradientsCpu*, *GradientsCuda* or *CentralDifferences*)
  perf   plexus-bench timings: a layer's rows of lab/bench/bench_cases.json, a model's training step
         (eager and CUDA graph, with peak memory)
  ab     perf of this build (B) against another (A: --against) or against an environment setting
         (A: as given, B: with --switch VAR=VALUE), ROUNDS rounds alternating which side goes first;
         prints every round, the medians, the fastest and the ratio B/A (above 1: B is faster);
         --scaling times data-parallel training on several GPUs in place of plexus-bench
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
import os
import re
import sys

from ab import run_ab
from gtest_runs import run_tests
from perf import run_perf
from targets import UsageError, bench_cases, layer_folders, resolve_targets, test_sources

MODES = ("test", "grad", "perf", "ab", "list")


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="lab/harness/harness.py", description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python3 lab/harness/harness.py test grad GDN --memcheck\n"
               "  python3 lab/harness/harness.py test grad layers --cpu                 # no GPU needed\n"
               "  python3 lab/harness/harness.py test Conv2d --filter '*TensorCore*' --env PLEXUS_CONV_WGMMA=0\n"
               "  python3 lab/harness/harness.py perf GDN IGDN --precision f32,tf32\n"
               "  python3 lab/harness/harness.py perf bmshj2018-factorized --profile --timeline\n"
               "  python3 lab/harness/harness.py ab models --switch PLEXUS_FUSE_ACTIVATIONS=0 --rounds 3\n"
               "  python3 lab/harness/harness.py ab bls2017 bmshj2018-hyperprior --against HEAD~1 --profile\n"
               "  python3 lab/harness/harness.py ab bmshj2018-factorized --against ../other-tree "
               "--scaling path/to/bsds500/train --env COUNTS='0 4'")
    parser.add_argument("words", nargs="*", metavar="MODE|TARGET", help="modes, then targets")
    parser.add_argument("--build", default="/tmp/plexus-harness/build", help="build folder (default: %(default)s)")
    parser.add_argument("--no-build", action="store_true", help="use --build as it is (and --against's build)")
    parser.add_argument("--logs", default="/tmp/plexus-harness/logs", help="log folder (default: %(default)s)")
    parser.add_argument("--cmake-arg", action="append", default=[], metavar="ARG",
                        help="one more configure argument, e.g. --cmake-arg=-DCMAKE_CUDA_ARCHITECTURES=90 (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="build jobs (default: the cores)")
    parser.add_argument("--env", action="append", default=[], metavar="VAR=VALUE",
                        help="set for every test and benchmark run, both sides of ab (repeatable)")
    parser.add_argument("--filter", help="test, grad: narrow the tests (GoogleTest filter, e.g. '*TensorCore*')")
    parser.add_argument("--cpu", action="store_true", help="test, grad: leave the CUDA tests out (no GPU needed)")
    parser.add_argument("--memcheck", action="store_true",
                        help="test, grad: also run the selected CUDA tests under compute-sanitizer memcheck")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a test binary may run (default: 900)")
    parser.add_argument("--precision", help="perf, ab: f32, tf32 or bf16, or several with commas "
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
    parser.add_argument("--scaling", metavar="IMAGE_FOLDER", help="ab: data-parallel training of the models on these "
                        "images in place of plexus-bench (lab/experiments/ddp-scaling.sh; --env COUNTS='0 4' picks "
                        "the --gpus counts)")
    parser.add_argument("--steps", type=int, default=1500, help="ab --scaling: steps of each run (default: 1500)")
    args = parser.parse_args(argv)
    try:
        check_arguments(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"lab/harness/harness.py: {e}", file=sys.stderr)
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
    only("--scaling", ("ab",), args.scaling)
    if args.cpu and args.memcheck:
        raise UsageError("--memcheck runs the CUDA tests, which --cpu leaves out")
    for option, value, low in (("--rounds", args.rounds, 1), ("--jobs", args.jobs, 1), ("--timeout", args.timeout, 1),
                               ("--seconds", args.seconds, 1), ("--warmup", args.warmup, 0),
                               ("--repeats", args.repeats, 1)):
        if value is not None and value < low:
            raise UsageError(f"{option} must be at least {low}, got {value}")
    args.precisions = (args.precision or "bf16").split(",")
    for p in args.precisions:
        if p not in ("f32", "tf32", "bf16"):
            raise UsageError(f"--precision: unknown precision '{p}' (f32, tf32, bf16)")
    if mode == "ab":
        if bool(args.against) == bool(args.switch):
            raise UsageError("ab needs exactly one of --against DIR|REV and --switch VAR=VALUE")
        if args.switch:
            args.switch = environment_setting(args.switch, "--switch")
    for option, folder in (("--data", args.data), ("--scaling", args.scaling)):
        if folder and not os.path.isdir(folder):
            raise UsageError(f"{option}: no folder '{folder}'")
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    args.targets = resolve_targets(targets, testing, timing)
    if (args.profile or args.timeline or args.kernels or args.data) and not args.targets["models"]:
        raise UsageError("--profile, --timeline, --kernels and --data time models' steps: name a model")
    if args.scaling and (args.targets["layers"] or args.profile or args.precision):
        raise UsageError("--scaling trains models at plexus-ae's precision: no layers, --profile or --precision")


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
        print(f"lab/harness/harness.py: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"lab/harness/harness.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())

"""test and grad: a test binary's tests of a mode, nothing skipped, optionally under compute-sanitizer memcheck."""
import fnmatch
import os
import re
import shutil
import subprocess
import time

from build import build, run_environment
from targets import CUDA_PATTERN, ROOT, TWO_GPU_PATTERN, select_tests


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

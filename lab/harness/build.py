"""Building what a run needs, and the environment runs get."""
import os
import subprocess
import sys
import time


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

#!/usr/bin/env python3
"""How much of a PyTorch training step is GPU work, and how much is the GPU
waiting for Python to launch it:

  python3 lab/bench/torch_gpu_time.py --cases lab/bench/headline_cases.json [--only TEXT] [--steps 5]

For each model of the cases file, at bf16 (autocast + channels_last) as
torch_bench.py builds its steps: PyTorch eager, torch.compile, and
CompressAI's own compiled step where it has the model. For each: the step's
wall time as torch_bench.py times it (CUDA events around one step, median of
10), and, over --steps steps traced by torch.profiler, the GPU's busy time
per step (the union of the kernels', copies' and fills' intervals) and the
idle rest. The busy time is what the step would take if the GPU never waited
for the host: a bound on what any way of launching the same kernels (CUDA
graphs included) could reach. One JSON line per step kind on stdout."""
import argparse
import json
import os
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def busy_ms(trace_path):
    """(busy ms, span ms) of the device events of a Chrome trace."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    intervals = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") in DEVICE_CATEGORIES and "dur" in e)
    if not intervals:
        raise RuntimeError("the trace holds no device events")
    busy, covered = 0.0, intervals[0][0]
    for start, end in intervals:
        busy += max(0.0, end - max(start, covered))
        covered = max(covered, end)
    return busy / 1e3, (covered - intervals[0][0]) / 1e3


def measure(step, steps):
    for _ in range(15):  # compiles, tunes cuDNN, settles the allocator
        step()
    wall = tb.median_ms(step, 0, 10)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        busy, span = busy_ms(path)
    return {"wall_step_ms": wall, "gpu_busy_step_ms": busy / steps, "traced_span_step_ms": span / steps}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="lab/bench/headline_cases.json")
    ap.add_argument("--only", default="")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dev = torch.device("cuda")
    models = tb.compressai_models()
    for m in json.load(open(args.cases))["models"]:
        if args.only not in m["name"]:
            continue
        kinds = [("pytorch", setting) for setting in ("eager", "compile")]
        if models is not None and m["name"] in tb.COMPRESSAI_TWINS:
            kinds.append(("compressai", "compile"))
        for framework, setting in kinds:
            tb.reset_memory()
            step = (tb.spec_step(m, "bf16", setting, dev) if framework == "pytorch"
                    else tb.compressai_step(models, m, "bf16", True, dev))
            row = {"name": m["name"], "framework": framework, "setting": setting, "batch": m["batch"]}
            row.update(measure(step, args.steps))
            row["wall_images_per_s"] = 1000.0 * m["batch"] / row["wall_step_ms"]
            row["gpu_bound_images_per_s"] = 1000.0 * m["batch"] / row["gpu_busy_step_ms"]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""One training step's kernels by kind, from `ncu --csv --metrics gpu__time_duration.sum`
over plexus-bench --models (python3 lab/harness/harness.py perf MODEL --kernels):
    python3 lab/bench/step_kernels.py MODEL.csv [--list]
The step is the kernels after the first Adam update up to and including the
second (the eager steps run first, each ending in fused_adam_kernel). Prints
the microseconds of each kind of kernel and its share of the step; --list
also prints every kernel of the step in order."""
import collections
import csv
import re
import sys

# Kinds by a part of the kernel's name, first match wins.
KINDS = [
    ("nchw_to_nhwc", "copy: NCHW -> NHWC bf16"),
    ("phases_kernel", "copy: weight gradient, X by stride phase"),
    ("shifted_rows", "copy: weight gradient, shifted rows of Y"),
    ("channel_rows", "copy: channel rows bf16"),
    ("reduce_splits", "split-K sums"),
    ("sum_tap_partials", "split-K sums"),
    ("sum_partials", "split-K sums"),
    ("batch_sum", "split-K sums"),
    ("channel_sums", "bias gradient"),
    ("few_channel_conv::", "convolution: few-channel kernels (layers next to RGB)"),
    ("wgmma_gather", "convolution: wgmma forward / input gradient"),
    ("wgmma_weight_grad", "convolution: wgmma weight gradient"),
    ("weight_grad", "convolution: mma.sync weight gradient"),
    ("pack_weight", "convolution: weight packing"),
    ("gdn_parameter", "GDN parameter gradients"),
    ("gdn_", "GDN / IGDN"),
    ("adam", "Adam"),
    ("zero_spans", "parameter gradients zeroed"),
    ("memset ", "memset nodes"),
    ("memcpy ", "memcpy nodes"),
    ("entropy", "entropy models"),
    ("density", "entropy models"),
    ("gaussian_conditional", "entropy models"),
]


def kind(name):
    for key, label in KINDS:
        if key in name:
            return label
    return "other: " + re.sub(r"\(.*", "", name).split("::")[-1].split("<")[0]


def main():
    rows = list(csv.DictReader(line for line in open(sys.argv[1]) if line.startswith('"')))
    kernels = [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1000) for r in rows
               if r["Metric Name"] == "gpu__time_duration.sum"]
    adams = [i for i, (name, _) in enumerate(kernels) if "fused_adam_kernel" in name]
    if len(adams) < 2:
        sys.exit("step_kernels: fewer than two Adam updates in " + sys.argv[1])
    step = kernels[adams[0] + 1:adams[1] + 1]
    total = sum(us for _, us in step)
    if "--list" in sys.argv:
        for name, us in step:
            print(f"{us:9.1f}  {re.sub(r'plexus::', '', name)[:140]}")
    sums, counts = collections.defaultdict(float), collections.Counter()
    for name, us in step:
        sums[kind(name)] += us
        counts[kind(name)] += 1
    print(f"{'kind':54} {'us':>8} {'share':>6} {'kernels':>7}")
    for label, us in sorted(sums.items(), key=lambda item: -item[1]):
        print(f"{label:54} {us:8.1f} {100 * us / total:5.1f}% {counts[label]:7d}")
    print(f"{'one step':54} {total:8.1f} {'':6} {len(step):7d}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per-node tables of `plexus-bench --profile` (its "profile" JSON lines: one
per node of a model's step, forward and backward milliseconds and the node's
floor), for one run or two side by side:
    python3 lab/bench/profile_table.py RUN.jsonl            # every node, with its share of the step
    python3 lab/bench/profile_table.py BASE.jsonl THIS.jsonl  # both, and this / base per node
Lines that are not JSON, and rows of other kinds, are skipped. With two runs
the nodes are matched by model and name; a node in only one run is listed
with a dash on the other side."""
import json
import sys


def read_profile(path):
    """{(model, node): row} of the profile rows in `path`, in file order."""
    rows = {}
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("kind") == "profile":
                rows[(row["model"], row["node"])] = row
    return rows


def total_ms(row):
    return row["forward_ms"] + row["backward_ms"]


def one_run(rows):
    """Lines of the table of one run: node, type, forward, backward, share of
    its model's step (the sum of its nodes), time over floor."""
    step = {}
    for (model, _), row in rows.items():
        step[model] = step.get(model, 0.0) + total_ms(row)
    lines = [f"{'model':22} {'node':22} {'type':24} {'fwd ms':>8} {'bwd ms':>8} {'share':>6} {'/floor':>7}"]
    for (model, node), row in rows.items():
        floor = row.get("floor_ms", 0.0)
        over = f"{total_ms(row) / floor:6.1f}x" if floor > 0 else "      -"
        share = total_ms(row) / step[model] if step[model] > 0 else 0.0
        lines.append(f"{model:22} {node:22} {row['type']:24} {row['forward_ms']:8.3f} {row['backward_ms']:8.3f} "
                     f"{100 * share:5.1f}% {over}")
    for model, ms in step.items():
        lines.append(f"{model:22} {'(all nodes)':22} {'':24} {'':>8} {'':>8} {ms:6.3f} ms")
    return lines


def two_runs(base, this):
    """Lines of the side-by-side table: forward + backward of each node in
    both runs and this / base (below 1: faster)."""
    keys = list(base) + [key for key in this if key not in base]
    lines = [f"{'model':22} {'node':22} {'base fwd+bwd':>16} {'this fwd+bwd':>16} {'this/base':>9}"]
    sums = {}
    for model, node in keys:
        b, t = base.get((model, node)), this.get((model, node))
        cells = []
        for row in (b, t):
            cells.append(f"{row['forward_ms']:7.3f}+{row['backward_ms']:7.3f}" if row else f"{'-':>15}")
        ratio = f"{total_ms(t) / total_ms(b):9.3f}" if b and t and total_ms(b) > 0 else f"{'-':>9}"
        lines.append(f"{model:22} {node:22} {cells[0]:>16} {cells[1]:>16} {ratio}")
        sums.setdefault(model, [0.0, 0.0])
        sums[model][0] += total_ms(b) if b else 0.0
        sums[model][1] += total_ms(t) if t else 0.0
    for model, (b, t) in sums.items():
        ratio = f"{t / b:9.3f}" if b > 0 else f"{'-':>9}"
        lines.append(f"{model:22} {'(all nodes)':22} {b:16.3f} {t:16.3f} {ratio}")
    return lines


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    runs = [read_profile(path) for path in argv[1:]]
    for path, rows in zip(argv[1:], runs):
        if not rows:
            print(f"profile_table: no profile rows in {path} (plexus-bench --profile writes them)", file=sys.stderr)
            return 1
    print("\n".join(one_run(runs[0]) if len(runs) == 1 else two_runs(*runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

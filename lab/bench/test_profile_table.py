#!/usr/bin/env python3
"""Tests of the tables of plexus-bench's step breakdowns: lab/bench/profile_table.py (per-node tables of
--profile; the classes Profile*) and lab/bench/timeline_table.py (the split of a step's time from the kernels
of --timeline; the classes Timeline*). Standard library only; run:  python3 lab/bench/test_profile_table.py
(one tool's:  python3 lab/bench/test_profile_table.py TimelineStepSummary TimelineTable).
Expected values are worked out by hand in the comments, not taken from the code."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import profile_table  # noqa: E402
import timeline_table  # noqa: E402


def node(name, forward_ms, backward_ms, floor_ms, model="m"):
    return {"kind": "profile", "model": model, "node": name, "type": "Conv2d", "forward_ms": forward_ms,
            "backward_ms": backward_ms, "flops": 1.0, "bytes": 1.0, "floor_ms": floor_ms}


def write(folder, name, rows):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("a line that is not JSON\n")
        f.write(json.dumps({"kind": "train_step_graph", "name": "m", "images_per_s": 1.0}) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def run(*paths):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = profile_table.main(["profile_table.py", *paths])
    return rc, out.getvalue(), err.getvalue()


class ProfileTableTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()

    def line(self, text, name):
        return next(line for line in text.splitlines() if f" {name} " in f" {line} ")

    def test_one_run_gives_each_nodes_share_and_time_over_floor(self):
        # a: 1 + 2 = 3 ms of a 4 ms step (75%), floor 0.5: 6.0x; b: 0.5 + 0.5 = 1 ms (25%), no floor.
        path = write(self.folder, "run.jsonl", [node("a", 1.0, 2.0, 0.5), node("b", 0.5, 0.5, 0.0)])
        rc, out, _ = run(path)
        self.assertEqual(rc, 0)
        self.assertIn("75.0%", self.line(out, "a"))
        self.assertIn("6.0x", self.line(out, "a"))
        self.assertIn("25.0%", self.line(out, "b"))
        self.assertIn("4.000 ms", self.line(out, "(all nodes)"))

    def test_two_runs_give_this_over_base_per_node_and_for_the_step(self):
        # a: 3 ms -> 1.5 ms (0.500); b: 1 ms -> 1 ms (1.000); all: 4 -> 2.5 ms (0.625).
        base = write(self.folder, "base.jsonl", [node("a", 1.0, 2.0, 0.5), node("b", 0.5, 0.5, 0.0)])
        this = write(self.folder, "this.jsonl", [node("a", 0.5, 1.0, 0.5), node("b", 0.25, 0.75, 0.0)])
        rc, out, _ = run(base, this)
        self.assertEqual(rc, 0)
        self.assertTrue(self.line(out, "a").endswith("0.500"), out)
        self.assertTrue(self.line(out, "b").endswith("1.000"), out)
        self.assertTrue(self.line(out, "(all nodes)").endswith("0.625"), out)

    def test_a_node_in_one_run_only_gets_a_dash_on_the_other_side(self):
        base = write(self.folder, "base.jsonl", [node("a", 1.0, 1.0, 0.0)])
        this = write(self.folder, "this.jsonl", [node("a", 1.0, 1.0, 0.0), node("c", 1.0, 1.0, 0.0)])
        rc, out, _ = run(base, this)
        self.assertEqual(rc, 0)
        self.assertTrue(self.line(out, "c").rstrip().endswith("-"), out)

    def test_a_file_without_profile_rows_is_an_error_naming_it(self):
        path = write(self.folder, "empty.jsonl", [])
        rc, _, err = run(path)
        self.assertEqual(rc, 1)
        self.assertIn("empty.jsonl", err)

    def test_wrong_argument_count_prints_the_usage(self):
        rc, _, err = run()
        self.assertEqual(rc, 2)
        self.assertIn("profile_table.py", err)


# timeline_table.py (plexus-bench --timeline)

def kernel(name, start, end, step=0, stream=1, model="m"):
    return {"kind": "kernel", "model": model, "step": step, "name": name, "stream": stream,
            "start_us": start, "end_us": end}


# One step of span 40 us: GDN [2, 12) on stream 1; Adam [7, 17) on stream 2
# (beside the GDN for 5 us); a ReLU [20, 30); span ends at 40.
#   before the first kernel 2; GDN alone 2..7 = 5; both 7..12 = 5; Adam alone
#   12..17 = 5; gap 17..20 = 3; ReLU alone 20..30 = 10; after the last 10.
STEP = [kernel("gdn_bf16_tile_forward", 2, 12), kernel("fused_adam_kernel", 7, 17, stream=2),
        kernel("void plexus::layers::<unnamed>::relu_forward<float>(float*)", 20, 30)]


class TimelineStepSummary(unittest.TestCase):
    def test_split_of_the_span(self):
        s = timeline_table.step_summary(STEP, 40)
        self.assertEqual(s["split"], {"before": 2, "alone": 20, "side_by_side": 5, "gaps": 3, "after": 10})
        self.assertEqual(sum(s["split"].values()), 40)

    def test_kinds_alone_and_beside(self):
        kinds = timeline_table.step_summary(STEP, 40)["kinds"]
        self.assertEqual(kinds["GDN / IGDN"], {"count": 1, "sum": 10, "alone": 5, "beside": 5})
        self.assertEqual(kinds["Adam"], {"count": 1, "sum": 10, "alone": 5, "beside": 5})
        self.assertEqual(kinds["other: relu_forward"], {"count": 1, "sum": 10, "alone": 10, "beside": 0})

    def test_three_side_by_side_and_touching_kernels(self):
        # A [0, 10), B [0, 10), C [10, 20): A and B side by side for 10; C alone
        # for 10 (touching at 10 is no overlap); no gap.
        ks = [kernel("gdn_a", 0, 10), kernel("gdn_b", 0, 10, stream=2), kernel("fused_adam_kernel", 10, 20)]
        s = timeline_table.step_summary(ks, 20)
        self.assertEqual(s["split"], {"before": 0, "alone": 10, "side_by_side": 10, "gaps": 0, "after": 0})
        self.assertEqual(s["kinds"]["GDN / IGDN"]["beside"], 20)  # each of the two, 10 us


class TimelineTable(unittest.TestCase):
    def test_medians_over_steps_and_the_command_line(self):
        rows = [{"kind": "timeline_step", "model": "m", "step": i, "span_us": span}
                for i, span in enumerate([40, 50, 44])]
        for i in range(3):
            rows += [dict(k, step=i) for k in STEP]
        rows.append({"kind": "timeline_step", "model": "other", "step": 0, "span_us": 1})
        out = io.StringIO()
        timeline_table.print_table("m", timeline_table.summaries(rows, "m"), out)
        text = out.getvalue()
        self.assertIn("medians of 3 steps", text)
        # Median span 44; after the last kernel 44 - 30 = 14 in the median step.
        self.assertIn("step span 44.0: before the first kernel 2.0, kernels alone 20.0, side by side 5.0, "
                      "gaps 3.0, after the last 14.0", text)
        lines = text.splitlines()
        self.assertTrue(lines[2].startswith("other: relu_forward"))  # most time alone first
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
            done = subprocess.run([sys.executable, os.path.join(HERE, "timeline_table.py"), path, "--model", "m"],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("step span 44.0", done.stdout)
            with open(path, "a") as f:
                f.write("not json\n")
            bad = subprocess.run([sys.executable, os.path.join(HERE, "timeline_table.py"), path],
                                 capture_output=True, text=True)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("is not JSON", bad.stderr)


if __name__ == "__main__":
    unittest.main()

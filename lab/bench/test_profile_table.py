#!/usr/bin/env python3
"""Tests of lab/bench/profile_table.py (per-node tables of plexus-bench
--profile). Standard library only; run:  python3 lab/bench/test_profile_table.py
Expected values are worked out by hand in the comments, not taken from the code."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import profile_table  # noqa: E402


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


if __name__ == "__main__":
    unittest.main()

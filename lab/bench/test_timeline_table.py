#!/usr/bin/env python3
"""Tests of lab/bench/timeline_table.py (plexus-bench --timeline). Standard
library only; run:  python3 lab/bench/test_timeline_table.py
Expected values are worked out by hand in the comments, not taken from the code."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import timeline_table  # noqa: E402


def kernel(name, start, end, step=0, stream=1, model="m"):
    return {"kind": "kernel", "model": model, "step": step, "name": name, "stream": stream,
            "start_us": start, "end_us": end}


# One step of span 40 us: GDN [2, 12) on stream 1; Adam [7, 17) on stream 2
# (beside the GDN for 5 us); a ReLU [20, 30); span ends at 40.
#   before the first kernel 2; GDN alone 2..7 = 5; both 7..12 = 5; Adam alone
#   12..17 = 5; gap 17..20 = 3; ReLU alone 20..30 = 10; after the last 10.
STEP = [kernel("gdn_bf16_tile_forward", 2, 12), kernel("fused_adam_kernel", 7, 17, stream=2),
        kernel("void plexus::layers::<unnamed>::relu_forward<float>(float*)", 20, 30)]


class StepSummary(unittest.TestCase):
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


class Table(unittest.TestCase):
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

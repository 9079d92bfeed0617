#!/usr/bin/env python3
"""Tests of the benchmark tables' rounds (lab/bench/compare.py, and
lab/bench/run.sh --rounds with stand-ins for plexus-bench and PyTorch).
Standard library only; run:  python3 lab/bench/test_compare.py
Expected values are worked out by hand in the comments, not taken from the code."""
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402


def layer(forward_ms, backward_ms):
    return {"kind": "layer", "name": "Conv2d 5x5/2 128->128 @64", "precision": "bf16", "pass_flops": 1e9,
            "forward_ms": forward_ms, "backward_ms": backward_ms}


def write_lines(folder, name, rows):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("some text a tool printed\n")  # not a JSON line: skipped
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


class MedianOfRoundsTest(unittest.TestCase):
    def test_one_round_is_kept_as_it_is(self):
        row = compare.median_of_rounds([layer(1.5, 3.0)])
        self.assertEqual((row["forward_ms"], row["backward_ms"], row["rounds"]), (1.5, 3.0, 1))

    def test_each_timing_is_its_own_median(self):
        # forward 1, 3, 2 -> 2; backward 9, 4, 5 -> 5 (the medians come from different rounds).
        row = compare.median_of_rounds([layer(1.0, 9.0), layer(3.0, 4.0), layer(2.0, 5.0)])
        self.assertEqual((row["forward_ms"], row["backward_ms"], row["rounds"]), (2.0, 5.0, 3))
        self.assertEqual(row["pass_flops"], 1e9)  # not a timing: as in the first round

    def test_an_even_count_averages_the_middle_two(self):
        # 1, 2, 4, 10 -> (2 + 4) / 2 = 3.
        row = compare.median_of_rounds([layer(t, 1.0) for t in (10.0, 1.0, 4.0, 2.0)])
        self.assertEqual(row["forward_ms"], 3.0)

    def test_load_groups_the_rounds_of_each_case(self):
        with tempfile.TemporaryDirectory() as folder:
            step = {"kind": "train_step", "name": "bls2017", "step_ms": 4.0, "images_per_s": 4000.0}
            graph = {"kind": "train_step_graph", "name": "bls2017", "step_ms": 2.0, "images_per_s": 8000.0}
            path = write_lines(folder, "p.jsonl", [step, graph, dict(step, step_ms=6.0, images_per_s=2667.0),
                                                   dict(graph, step_ms=3.0, images_per_s=5333.0),
                                                   dict(step, step_ms=5.0, images_per_s=3200.0),
                                                   dict(graph, step_ms=2.5, images_per_s=6400.0)])
            rows = compare.load(path)
        # The eager and CUDA-graph rows stay apart: eager 4, 6, 5 -> 5; graph 2, 3, 2.5 -> 2.5.
        self.assertEqual(set(rows), {"bls2017", "bls2017 (CUDA graph)"})
        self.assertEqual(rows["bls2017"]["step_ms"], 5.0)
        self.assertEqual(rows["bls2017"]["images_per_s"], 3200.0)
        self.assertEqual(rows["bls2017 (CUDA graph)"]["step_ms"], 2.5)
        self.assertEqual(rows["bls2017 (CUDA graph)"]["rounds"], 3)


class TableTest(unittest.TestCase):
    def table(self, plexus_rows, torch_rows):
        with tempfile.TemporaryDirectory() as folder:
            argv = [sys.argv[0], write_lines(folder, "plexus.jsonl", plexus_rows),
                    write_lines(folder, "torch.jsonl", torch_rows)]
            out, saved = io.StringIO(), sys.argv
            try:
                sys.argv = argv
                with redirect_stdout(out):
                    compare.main()
            finally:
                sys.argv = saved
        return out.getvalue()

    def test_the_ratio_is_of_the_medians(self):
        # Plexus forward 1.0, 1.2, 0.8 -> 1.0; PyTorch 0.9, 1.3, 1.1 -> 1.1: 1.10x.
        # Backward: Plexus 2, 2, 2 -> 2; PyTorch 1, 3, 2 -> 2: 1.00x.
        # Round by round the forward ratios would be 0.90x, 1.08x, 1.38x.
        table = self.table([layer(1.0, 2.0), layer(1.2, 2.0), layer(0.8, 2.0)],
                           [layer(0.9, 1.0), layer(1.3, 3.0), layer(1.1, 2.0)])
        self.assertIn("| Conv2d 5x5/2 128->128 @64 | 1.000 | 1.100 | 1.10x | 2.000 | 2.000 | 1.00x |", table)
        self.assertIn("medians over 3 rounds", table)

    def test_a_single_round_says_nothing_about_rounds(self):
        table = self.table([layer(1.0, 2.0)], [layer(2.0, 2.0)])
        self.assertIn("| 1.000 | 2.000 | 2.00x |", table)
        self.assertNotIn("rounds", table)


class PrecisionsTableTest(unittest.TestCase):
    def test_a_row_per_precision_with_ratios_and_rates(self):
        # bf16: Plexus 1 + 2 ms, PyTorch 2 + 3 ms: forward 2.00x, backward 1.50x, both 5/3 = 1.67x; 1e9 FLOPs
        # a pass: Plexus 1e9 / 1 ms = 1 TFLOP/s forward, 2e9 / 2 ms = 1 backward; PyTorch 0.5 -> "0" (rounded
        # half to even) and 0.67 -> "1". f32: Plexus 4 + 8 ms, PyTorch 4 + 4: 1.00x, 0.50x, 8/12 = 0.67x.
        # The ceiling of each precision's torch.jsonl comes first.
        f32 = [dict(layer(4.0, 8.0), precision="f32")]
        with tempfile.TemporaryDirectory() as folder:
            for name, plexus, torch_rows in (("bf16", [layer(1.0, 2.0)], [layer(2.0, 3.0)]),
                                             ("f32", f32, [dict(layer(4.0, 4.0), precision="f32")])):
                os.mkdir(os.path.join(folder, name))
                write_lines(os.path.join(folder, name), "plexus.jsonl", plexus)
                ceiling = {"kind": "ceiling", "name": "matmul 8192^3", "tflops": 700.0 if name == "bf16" else 50.0}
                write_lines(os.path.join(folder, name), "torch.jsonl", [ceiling] + torch_rows)
            out, saved = io.StringIO(), sys.argv
            try:
                sys.argv = [saved[0], "--precisions", os.path.join(folder, "bf16"), os.path.join(folder, "f32")]
                with redirect_stdout(out):
                    compare.main()
            finally:
                sys.argv = saved
        table = out.getvalue()
        self.assertIn("- matmul ceiling at bf16 (PyTorch matmul 8192^3): 700 TFLOP/s", table)
        self.assertIn("- matmul ceiling at f32 (PyTorch matmul 8192^3): 50 TFLOP/s", table)
        self.assertIn("| Conv2d 5x5/2 128->128 @64 | bf16 | 1.000 | 2.000 | 2.00x | 2.000 | 3.000 | 1.50x | 1.67x "
                      "| 1 / 1 | 0 / 1 |", table)
        self.assertIn("| Conv2d 5x5/2 128->128 @64 | f32 | 4.000 | 4.000 | 1.00x | 8.000 | 4.000 | 0.50x | 0.67x |",
                      table)


MIB = 2 ** 20


def step(name, kind, images_per_s, peak_mib, **fields):
    return dict({"kind": kind, "name": name, "precision": "bf16", "images_per_s": images_per_s,
                 "step_ms": 16000.0 / images_per_s, "peak_bytes": peak_mib * MIB}, **fields)


def torch_step(name, framework, setting, images_per_s, peak_mib):
    return step(name, "train_step", images_per_s, peak_mib, framework=framework, setting=setting)


class ModelTableTest(TableTest):
    def test_plexus_medians_against_the_fastest_round_of_each_setting(self):
        plexus = [step("mbt2018-mean", "train_step_graph", v, 1024) for v in (100.0, 120.0, 110.0)]
        plexus += [step("mbt2018-mean", "train_step", v, 2048) for v in (80.0, 90.0, 70.0)]
        plexus += [step("bls2017", "train_step_graph", 200.0, 512)]
        reference = []
        for framework, setting, speeds, peaks in (
                ("pytorch", "eager", (50.0, 60.0, 55.0), (3000, 3072, 3050)),
                ("pytorch", "compile", (70.0, 65.0, 75.0), (2048, 2048, 2048)),
                ("pytorch", "compile-bf16", (100.0, 88.0, 95.0), (1536, 1536, 1536)),
                ("pytorch", "strongest", (98.0, 104.0, 102.0), (1400, 1400, 1400)),
                ("compressai", "eager", (40.0, 45.0, 42.0), (2560, 2560, 2560)),
                ("compressai", "compile", (55.0, 50.0, 52.0), (2000, 2000, 2000))):
            reference += [torch_step("mbt2018-mean", framework, setting, v, m) for v, m in zip(speeds, peaks)]
        reference += [torch_step("bls2017", "pytorch", "eager", 250.0, 700)]
        table = self.table(plexus, reference)
        # Plexus graph 100, 120, 110 -> median 110; eager 80, 90, 70 -> 80. The reference's fastest rounds:
        # eager 60 (peak the largest of 3000, 3072, 3050 MiB: 3072), compile 75, compile-bf16 100,
        # strongest 104, CompressAI eager 45 and compiled 55. Ratios: 110 / 104 = 1.058 -> 1.06x (the
        # strongest setting is the fastest PyTorch one), 110 / 55 = 2.00x.
        self.assertIn("| mbt2018-mean | 110.0 (1024 MiB) | 80.0 (2048 MiB) | 60.0 (3072 MiB) | 75.0 (2048 MiB) "
                      "| 100.0 (1536 MiB) | 104.0 (1400 MiB) | 45.0 (2560 MiB) | 55.0 (2000 MiB) | 1.06x | 2.00x |",
                      table)
        # bls2017: only PyTorch eager, 200 / 250 = 0.80x; no eager Plexus row and no CompressAI: dashes.
        self.assertIn("| bls2017 | 200.0 (512 MiB) | - | 250.0 (700 MiB) | - | - | - | - | - | 0.80x | - |", table)
        self.assertNotIn("| layer", table)  # no layer rows, no layer table
        self.assertNotIn("one side only", table)

    def test_gpu_bound_columns_take_the_shortest_busy_time_of_each_framework(self):
        plexus = [step("bmshj2018-factorized", "train_step_graph", v, 1024) for v in (400.0, 420.0, 410.0)]
        reference = []
        # (setting, images/s, busy ms) per round; step_ms = 16000 / images/s (batch 16).
        for framework, setting, rounds in (
                ("pytorch", "eager", ((100.0, 20.0), (120.0, 16.0))),
                ("pytorch", "compile", ((200.0, 50.0), (250.0, 40.0))),
                ("compressai", "compile", ((150.0, 64.0),))):
            reference += [dict(torch_step("bmshj2018-factorized", framework, setting, v, 900), gpu_busy_step_ms=b)
                          for v, b in rounds]
        reference.append(torch_step("bmshj2018-factorized", "compressai", "eager", 100.0, 900))  # no busy time
        table = self.table(plexus, reference)
        # PyTorch: busy 20, 16, 50, 40 ms for a batch of 16 -> 800, 1000, 320, 400 img/s: 1000 (eager round 2).
        # CompressAI: busy 64 ms -> 250 img/s (its eager row has none). Plexus median 410:
        # 410 / 1000 = 0.41x, 410 / 250 = 1.64x; fastest rounds 250 (PyTorch) and 150 (CompressAI).
        self.assertIn("| vs PyTorch GPU-bound | vs CompressAI GPU-bound |", table)
        self.assertIn("| 1.64x | 2.73x | 1000.0 | 250.0 | 0.41x | 1.64x |", table)

    def test_no_gpu_bound_columns_without_busy_times(self):
        plexus = [step("bls2017", "train_step_graph", 200.0, 512)]
        table = self.table(plexus, [torch_step("bls2017", "pytorch", "eager", 250.0, 700)])
        self.assertNotIn("GPU-bound", table)

# Stand-ins: plexus-bench and torch_bench.py each print one layer row whose
# forward time is the number of the call in a shared counter (1, 2, 3...), so
# the order of the sides is visible in the times.
FAKE_PLEXUS = """#!/usr/bin/env bash
n=$(( $(cat "$COUNTER") + 1 )); echo $n > "$COUNTER"
echo "plexus $n" >> "$ORDER"
echo "plexus $*" >> "$ARGS"
echo '{"kind": "layer", "name": "L", "precision": "tf32", "pass_flops": 0, "forward_ms": '$n', "backward_ms": 1}'
"""
FAKE_PYTHON = """#!/usr/bin/env bash
case "$1" in
  *torch_bench.py)
    n=$(( $(cat "$COUNTER") + 1 )); echo $n > "$COUNTER"
    echo "torch $n" >> "$ORDER"
    echo "torch $*" >> "$ARGS"
    echo '{"kind": "layer", "name": "L", "precision": "tf32", "pass_flops": 0, "forward_ms": '$n', "backward_ms": 1}' ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
"""


class RunRoundsTest(unittest.TestCase):
    def run_script(self, *options):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        os.makedirs(os.path.join(folder, "build/bin"))
        for path, text in ((os.path.join(folder, "build/bin/plexus-bench"), FAKE_PLEXUS),
                           (os.path.join(folder, "python"), FAKE_PYTHON)):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        with open(os.path.join(folder, "counter"), "w") as f:
            f.write("0\n")
        env = dict(os.environ, BUILD=os.path.join(folder, "build"), PYTHON=os.path.join(folder, "python"),
                   REAL_PYTHON=sys.executable, OUT=os.path.join(folder, "out"),
                   COUNTER=os.path.join(folder, "counter"), ORDER=os.path.join(folder, "order"),
                   ARGS=os.path.join(folder, "args"))
        result = subprocess.run(["bash", os.path.join(HERE, "run.sh"), "--precision", "tf32", *options], env=env,
                                capture_output=True, text=True)
        order = []
        if os.path.exists(env["ORDER"]):
            with open(env["ORDER"]) as f:
                order = [line for line in f.read().split("\n") if line]
        return result, order, folder

    def test_three_rounds_alternate_and_the_table_shows_medians(self):
        result, order, folder = self.run_script("--rounds", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        # Round 1 Plexus first, round 2 PyTorch first, round 3 Plexus first.
        self.assertEqual(order, ["plexus 1", "torch 2", "torch 3", "plexus 4", "plexus 5", "torch 6"])
        # Plexus 1, 4, 5 -> 4; PyTorch 2, 3, 6 -> 3: 3 / 4 = 0.75x.
        self.assertIn("| L | 4.000 | 3.000 | 0.75x |", result.stdout)
        with open(os.path.join(folder, "out/table.md")) as f:
            self.assertIn("| L | 4.000 | 3.000 | 0.75x |", f.read())

    def test_a_count_with_a_leading_zero_is_decimal(self):
        # "08" is 8 rounds (not an octal error): 16 runs in all.
        result, order, _ = self.run_script("--rounds", "08")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(order), 16)

    def test_a_second_run_into_the_same_folder_starts_afresh(self):
        result, _, folder = self.run_script()
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(folder, "out/plexus.jsonl")) as f:
            lines = [line for line in f if line.startswith("{")]
        self.assertEqual(len(lines), 1)
        self.assertIn("| L | 1.000 | 2.000 | 2.00x |", result.stdout)  # one round: Plexus 1, PyTorch 2

    def test_models_goes_to_both_sides(self):
        result, _, folder = self.run_script("--models")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(folder, "args")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 2)
        self.assertTrue(calls[0].startswith("plexus ") and calls[0].endswith(" --models"), calls[0])
        self.assertTrue(calls[1].startswith("torch ") and calls[1].endswith(" --models"), calls[1])

    def test_a_bad_round_count_is_refused_by_name(self):
        for bad in ("0", "00", "two", "-1", ""):
            result, order, folder = self.run_script("--rounds", bad)
            self.assertEqual(result.returncode, 2)
            self.assertIn(f"--rounds must be a whole number >= 1, got '{bad}'", result.stderr)
            self.assertEqual(order, [])  # nothing ran
            self.assertFalse(os.path.exists(os.path.join(folder, "out")))  # and nothing was written


if __name__ == "__main__":
    unittest.main()

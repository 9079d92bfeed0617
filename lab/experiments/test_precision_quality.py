#!/usr/bin/env python3
"""Tests of lab/experiments/precision_quality.py, the summary and verdict of
lab/experiments/precision-quality.sh. Standard library only; run:
  python3 lab/experiments/test_precision_quality.py
Expected values are worked out by hand in the comments, not taken from the code."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import precision_quality as pq  # noqa: E402


class RateDistortionCostTest(unittest.TestCase):
    def test_mse_from_psnr(self):
        # PSNR = 10 log10(1 / MSE): 30 dB is MSE 1e-3, 20 dB is 1e-2.
        self.assertAlmostEqual(pq.mse_from_psnr(30.0), 1e-3, places=15)
        self.assertAlmostEqual(pq.mse_from_psnr(20.0), 1e-2, places=15)

    def test_cost_is_the_trainers_loss(self):
        # 0.5 bpp + 0.01 * 65025 * 1e-3 = 0.5 + 0.65025 = 1.15025.
        self.assertAlmostEqual(pq.rd_cost(0.5, 1e-3, 0.01), 1.15025, places=12)

    def test_kodak_cost_uses_the_mean_mse_not_the_mean_psnr(self):
        # Two images, 30 dB at 0.4 bpp and 20 dB at 0.6 bpp: mean PSNR 25 dB,
        # mean bpp 0.5, mean MSE (1e-3 + 1e-2) / 2 = 5.5e-3, so
        # J = 0.5 + 0.01 * 65025 * 5.5e-3 = 0.5 + 3.576375 = 4.076375.
        # (MSE at the mean PSNR, 10^-2.5 = 3.162e-3, would give 2.556.)
        evaluation = {"images": [{"image": "a.png", "psnr": 30.0, "bpp": 0.4},
                                 {"image": "b.png", "psnr": 20.0, "bpp": 0.6}],
                      "mean_file": {"bpp": 0.51, "psnr": 25.0}}
        result = pq.kodak_result(evaluation, 0.01)
        self.assertEqual(result["images"], 2)
        self.assertAlmostEqual(result["bpp"], 0.5, places=12)
        self.assertAlmostEqual(result["psnr"], 25.0, places=12)
        self.assertAlmostEqual(result["mse"], 5.5e-3, places=15)
        self.assertAlmostEqual(result["J"], 4.076375, places=10)
        self.assertEqual(result["file_bpp"], 0.51)

    def test_no_images_is_an_error(self):
        with self.assertRaises(ValueError):
            pq.kodak_result({"images": []}, 0.01)


class PerImageTest(unittest.TestCase):
    def test_costs_per_image(self):
        # 30 dB, 0.4 bpp: 0.4 + 0.65025 = 1.05025; 20 dB, 0.6 bpp: 0.6 + 6.5025 = 7.1025.
        costs = pq.per_image_costs({"images": [{"image": "a", "psnr": 30.0, "bpp": 0.4},
                                               {"image": "b", "psnr": 20.0, "bpp": 0.6}]}, 0.01)
        self.assertAlmostEqual(costs["a"], 1.05025, places=10)
        self.assertAlmostEqual(costs["b"], 7.1025, places=10)

    def test_differences_over_common_images(self):
        # Common images a, b, c: differences +0.5, -0.5, 0 (d only in one, ignored): one lower,
        # mean 0, sample sd sqrt((0.25 + 0.25 + 0) / 2) = 0.5.
        d = pq.per_image_differences({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 1.5, "b": 1.5, "c": 3.0, "d": 9.0})
        self.assertEqual(d["images"], 3)
        self.assertEqual(d["lower"], 1)
        self.assertAlmostEqual(d["mean"], 0.0, places=12)
        self.assertAlmostEqual(d["sd"], 0.5, places=12)

    def test_no_common_image_is_an_error(self):
        with self.assertRaises(ValueError):
            pq.per_image_differences({"a": 1.0}, {"b": 1.0})


class TrainingResultTest(unittest.TestCase):
    def rows(self):
        # Windows of 100 steps: losses 9, 5, 4, 3, 2, 1; img/s 100 (start-up), then 300, 320, 280, 300, 300.
        losses = [9, 5, 4, 3, 2, 1]
        rates = [100, 300, 320, 280, 300, 300]
        rows = [{"kind": "train", "step": 100 * (i + 1), "loss": loss, "images_per_second": rate,
                 "elapsed_seconds": i + 1.0} for i, (loss, rate) in enumerate(zip(losses, rates))]
        rows.insert(3, {"kind": "val", "step": 300, "loss": 100.0})  # ignored
        return rows

    def test_final_loss_and_rate(self):
        result = pq.training_result(self.rows(), target_steps=600, final_windows=3)
        self.assertEqual(result["steps"], 600)
        self.assertEqual(result["stopped_by"], "steps")
        self.assertAlmostEqual(result["final_loss"], (3 + 2 + 1) / 3)  # the last three windows: 2.0
        self.assertAlmostEqual(result["images_per_second"], 300.0)  # (300 + 320 + 280 + 300 + 300) / 5
        self.assertEqual(result["final_loss_windows"], 3)

    def test_fewer_steps_than_asked_is_flagged(self):
        result = pq.training_result(self.rows(), target_steps=1000)
        self.assertEqual(result["stopped_by"], "time limit or interruption")
        # Five windows by default: (5 + 4 + 3 + 2 + 1) / 5 = 3.
        self.assertAlmostEqual(result["final_loss"], 3.0)

    def test_no_training_rows_is_an_error(self):
        with self.assertRaises(ValueError):
            pq.training_result([{"kind": "val", "step": 1}], target_steps=1)


def kodak(j, bpp=0.5, psnr=30.0):
    return {"J": j, "bpp": bpp, "psnr": psnr}


class VerdictTest(unittest.TestCase):
    def test_within_the_seed_spread(self):
        # |1.004 - 1.000| = 0.004 <= |0.995 - 1.000| = 0.005.
        c = pq.compare(kodak(1.000), kodak(1.004), kodak(0.995))
        self.assertTrue(c["no_measurable_cost"])
        self.assertAlmostEqual(c["bf16_minus_tf32"]["J"], 0.004)
        self.assertAlmostEqual(c["seed_spread_J"], 0.005)
        self.assertTrue(c["outcome"].startswith("no measurable cost"))

    def test_worse_beyond_the_spread_is_a_cost(self):
        # 0.006 > 0.005.
        c = pq.compare(kodak(1.000), kodak(1.006), kodak(0.995))
        self.assertFalse(c["no_measurable_cost"])
        self.assertTrue(c["outcome"].startswith("measurable cost"))

    def test_better_beyond_the_spread_is_not_within_the_rule(self):
        # |0.990 - 1.000| = 0.010 > |1.002 - 1.000| = 0.002: outside the spread, in BF16's favour.
        c = pq.compare(kodak(1.000), kodak(0.990), kodak(1.002))
        self.assertFalse(c["no_measurable_cost"])
        self.assertIn("favour", c["outcome"])

    def test_equal_to_the_spread_counts_as_within(self):
        # Exactly representable values: |1.25 - 1.0| = 0.25 = |0.75 - 1.0|.
        c = pq.compare(kodak(1.0), kodak(1.25), kodak(0.75))
        self.assertTrue(c["no_measurable_cost"])

    def test_simple_deltas(self):
        # bpp 0.50 -> 0.51 is +2.00%; PSNR 30.00 -> 29.95 is -0.05 dB; J 1.0 -> 1.01 is +1.00%.
        c = pq.compare(kodak(1.0, 0.50, 30.00), kodak(1.01, 0.51, 29.95), kodak(1.02, 0.49, 30.10))
        d = c["bf16_minus_tf32"]
        self.assertAlmostEqual(d["bpp_percent"], 2.0, places=10)
        self.assertAlmostEqual(d["psnr_db"], -0.05, places=10)
        self.assertAlmostEqual(d["J_percent"], 1.0, places=10)
        s = c["tf32_seed2_minus_seed1"]
        self.assertAlmostEqual(s["bpp_percent"], -2.0, places=10)
        self.assertAlmostEqual(s["psnr_db"], 0.10, places=10)
        line = pq.verdict_line(c)
        self.assertIn("bpp +2.00%", line)
        self.assertIn("PSNR -0.050 dB", line)
        self.assertIn("no measurable cost", line)
        self.assertNotIn("NOT at equal steps", line)
        self.assertIn("NOT at equal steps", pq.verdict_line(c, equal_steps=False))


class CommandLineTest(unittest.TestCase):
    def write_run(self, root, name, steps, psnr, bpp):
        folder = os.path.join(root, name)
        os.makedirs(os.path.join(folder, "kodak"))
        with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
            for step in (100, 200):
                f.write(json.dumps({"kind": "train", "step": min(step, steps), "loss": 2.0, "images_per_second": 500,
                                    "elapsed_seconds": 1}) + "\n")
        with open(os.path.join(folder, "kodak", "eval.json"), "w") as f:
            json.dump({"images": [{"image": "k.png", "psnr": psnr, "bpp": bpp}]}, f)
        return folder

    def test_end_to_end(self):
        with tempfile.TemporaryDirectory() as root:
            # lambda 0.01, 30 dB: distortion term 0.65025. J: 0.50 + 0.65025 = 1.15025 (tf32 seed 1),
            # 0.51 + 0.65025 = 1.16025 (bf16), 0.40 + 0.65025 = 1.05025 (seed 2): 0.01 <= 0.1, within.
            args = ["--lambda", "0.01", "--steps", "200",
                    "--tf32", self.write_run(root, "a", 200, 30.0, 0.50),
                    "--bf16", self.write_run(root, "b", 200, 30.0, 0.51),
                    "--tf32-seed2", self.write_run(root, "c", 150, 30.0, 0.40),
                    "--out", os.path.join(root, "out")]
            with redirect_stdout(io.StringIO()) as printed:
                self.assertEqual(pq.main(args), 0)
            with open(os.path.join(root, "out", "summary.json")) as f:
                summary = json.load(f)
            self.assertAlmostEqual(summary["runs"][0]["kodak"]["J"], 1.15025, places=10)
            self.assertAlmostEqual(summary["runs"][1]["kodak"]["J"], 1.16025, places=10)
            self.assertTrue(summary["comparison"]["no_measurable_cost"])
            # Seed 2 stopped at step 150 of 200: not at equal steps, and said so.
            self.assertFalse(summary["equal_steps"])
            self.assertEqual(summary["runs"][2]["training"]["stopped_by"], "time limit or interruption")
            self.assertIn("NOT at equal steps", printed.getvalue())
            with open(os.path.join(root, "out", "table.md")) as f:
                table = f.read()
            # elapsed 1 s, 500 img/s, loss 2, 0.51 bpp, 30 dB, J 1.16025 (its fourth decimal a tie: not compared).
            self.assertIn("| bf16-seed1 | bf16 | 1 | 200 | steps | 1 | 500 | 2.0000 | 0.5100 | 30.000 | 1.160", table)
            # One image each, the same PSNR: BF16 (0.51 bpp) is not lower than TF32 (0.50), seed 2 (0.40) is.
            self.assertIn("BF16 lower J than TF32 (seed 1) on 0 of 1 images", table)
            self.assertIn("TF32 seed 2 lower than seed 1 on 1 of 1", table)
            self.assertEqual(summary["comparison"]["per_image"]["tf32_seed2_minus_seed1"]["lower"], 1)
            self.assertIn("Rule: no measurable cost", table)

    def test_missing_evaluation_is_a_message(self):
        with tempfile.TemporaryDirectory() as root:
            a = self.write_run(root, "a", 200, 30.0, 0.5)
            os.remove(os.path.join(a, "kodak", "eval.json"))
            with self.assertRaises(SystemExit) as e:
                pq.main(["--lambda", "0.01", "--steps", "200", "--tf32", a, "--bf16", a, "--tf32-seed2", a,
                         "--out", os.path.join(root, "out")])
            self.assertIn("eval.json", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()

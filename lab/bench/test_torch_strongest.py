#!/usr/bin/env python3
"""Tests of PyTorch's strongest setting (lab/bench/torch_strongest.py, as
torch_bench.py builds it) up to the CUDA-graph capture, on the CPU: the step
that is recorded zeroes the gradients in place, computes Plexus's loss
(lambda * 255^2 * MSE + bpp) under bf16 autocast, and takes one capturable
Adam step; the gradients and inputs keep their addresses from step to step
(what a replayed graph relies on). Also torch_bench.py's --setting and the
other arguments it refuses. Needs torch (CPU is enough); without it the file
exits 77 (skipped). The capture and replay themselves need a GPU: headline.sh
checks them there (WholeStepGraph.check_replay_trains). Run:
  python3 lab/bench/test_torch_strongest.py"""
import contextlib
import io
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import torch_bench
    import torch_strongest

# Small cases of bundled specs: batch 2 of 64x64 (64: a multiple of every bundled model's stride);
# the variable-rate one also takes its level and MSE-weight inputs.
BLS2017 = {"name": "bls2017", "spec": os.path.join(ROOT, "models/specs/bls2017.json"), "batch": 2, "patch": 64,
           "lambda": 0.01}
VARIABLE_RATE = {"name": "mbt2018-mean-vr", "spec": os.path.join(ROOT, "models/specs/mbt2018-mean-vr.json"),
                 "batch": 2, "patch": 64, "lambdas": [0.0018, 0.0035, 0.0067, 0.013, 0.025, 0.0483]}
CPU = torch.device("cpu") if torch is not None else None


def cpu_graph(case):
    """The strongest setting's step of `case` on the CPU, uncompiled."""
    torch.manual_seed(0)
    return torch_bench.strongest_step(case, CPU, compile_mode=None)


@unittest.skipIf(torch is None, "needs torch")
class StrongestStepTest(unittest.TestCase):
    def test_adam_is_capturable(self):
        graph = cpu_graph(BLS2017)
        group = graph.optimizer.param_groups[0]
        self.assertTrue(group["capturable"])
        self.assertTrue(group["fused"])
        # Every trainable parameter of the model is in it.
        trained = {id(p) for g in graph.optimizer.param_groups for p in g["params"]}
        model = graph.run.model
        self.assertEqual(trained, {id(p) for p in model.parameters()})

    def test_the_loss_is_plexus_rate_distortion_loss(self):
        graph = cpu_graph(BLS2017)
        model = graph.run.model
        # lambda * 255^2 = 0.01 * 65025 = 650.25, the weight of the MSE; the rate's weight is 1.
        torch.manual_seed(7)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            blobs = model(**graph.inputs)
        expected = 650.25 * blobs["mse"] + blobs["bpp"]
        torch.manual_seed(7)  # the same noise in the step's forward
        loss = graph.step()
        self.assertTrue(torch.isfinite(loss).item())
        self.assertAlmostEqual(loss.item(), expected.item(), delta=1e-5 * abs(expected.item()))

    def test_a_one_layer_case_trains_on_its_mse_alone(self):
        # layers_v2_cases.json's attention block at batch 2 of 16x16 (its 192 channels): the loss is
        # lambda * 255^2 * mse = 650.25 * mse, no rate; the image has the case's channels, channels_last.
        with open(os.path.join(HERE, "layers_v2_cases.json")) as f:
            case = next(m for m in json.load(f)["models"] if m["name"] == "layer-window-attention")
        graph = cpu_graph(dict(case, batch=2, patch=16))
        image = graph.inputs["image"]
        self.assertEqual(list(image.shape), [2, 192, 16, 16])
        self.assertTrue(image.is_contiguous(memory_format=torch.channels_last))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            blobs = graph.run.model(**graph.inputs)
        self.assertNotIn("bpp", blobs)
        loss = graph.step()
        self.assertAlmostEqual(loss.item(), 650.25 * blobs["mse"].item(), delta=1e-5 * loss.item())
        self.assertEqual(graph.adam_steps(), 1)

    def test_a_step_zeroes_the_gradients_then_takes_one_adam_step(self):
        graph = cpu_graph(BLS2017)
        graph.warm_up(1)  # allocates the gradients and Adam's state
        self.assertEqual(graph.adam_steps(), 1)
        params = graph.params
        # Gradients of the loss at the current parameters, computed apart.
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            loss = graph.run(**graph.inputs)
        expected = torch.autograd.grad(loss, params)
        for p in params:  # what the step must not add to: it zeroes first
            p.grad.fill_(1e6)
        before = [p.detach().clone() for p in params]
        torch.manual_seed(3)
        graph.step()
        self.assertEqual(graph.adam_steps(), 2)
        for p, g in zip(params, expected):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
        self.assertTrue(any(not torch.equal(b, p) for b, p in zip(before, params)), "no parameter moved")

    def test_gradients_and_inputs_keep_their_addresses(self):
        graph = cpu_graph(VARIABLE_RATE)
        self.assertEqual(set(graph.inputs), {"image", "level", "mse_weight"})
        graph.warm_up(1)
        grads = [p.grad.data_ptr() for p in graph.params]
        inputs = {name: t.data_ptr() for name, t in graph.inputs.items()}
        graph.next_batch["image"].uniform_(0.0, 1.0)  # a new batch, copied in before the next step
        graph.copy_next_batch()
        graph.warm_up(1)
        self.assertEqual([p.grad.data_ptr() for p in graph.params], grads)
        self.assertEqual({name: t.data_ptr() for name, t in graph.inputs.items()}, inputs)
        torch.testing.assert_close(graph.inputs["image"], graph.next_batch["image"], rtol=0, atol=0)
        self.assertTrue(graph.inputs["image"].is_contiguous(memory_format=torch.channels_last))

    def test_recording_needs_a_cuda_device(self):
        graph = cpu_graph(BLS2017)
        graph.warm_up(1)
        with self.assertRaisesRegex(RuntimeError, "needs the module on a CUDA device"):
            graph.record()

    def test_an_unknown_adam_is_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, "unknown Adam implementation 'sgd'"):
            torch_strongest.capturable_adam([torch.nn.Parameter(torch.zeros(1))], "sgd")


@unittest.skipIf(torch is None, "needs torch")
class SettingArgumentsTest(unittest.TestCase):
    def refused(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit_:
            torch_bench.parse_args(list(argv))
        self.assertEqual(exit_.exception.code, 2)
        return err.getvalue()

    def test_settings_are_parsed(self):
        args = torch_bench.parse_args(["--setting", "eager, compile,strongest"])
        self.assertEqual(args.settings, ["eager", "compile", "strongest"])
        self.assertEqual(torch_bench.parse_args(["--settings", "compressai"]).settings, ["compressai"])
        self.assertEqual(torch_bench.parse_args([]).settings, [])

    def test_an_unknown_setting_is_named(self):
        self.assertIn("unknown setting 'fastest'", self.refused("--setting", "eager,fastest"))

    def test_no_compile_contradicts_a_compiled_setting(self):
        self.assertIn("--no-compile contradicts --setting strongest", self.refused("--no-compile", "--setting",
                                                                                    "strongest"))

    def test_step_counts_must_be_positive(self):
        self.assertIn("must be a whole number >= 1, got 0", self.refused("--timed-steps", "0"))
        self.assertIn("must be a whole number >= 0, got -1", self.refused("--warmup", "-1"))
        self.assertIn("invalid choice: 'sgd'", self.refused("--adam", "sgd"))

    def test_a_bf16_run_times_eager_compile_and_strongest(self):
        self.assertEqual(torch_bench.settings_for("bf16", True), ["eager", "compile", "strongest"])
        self.assertEqual(torch_bench.settings_for("tf32", True), ["eager", "compile", "compile-bf16", "strongest"])
        self.assertEqual(torch_bench.settings_for("bf16", False), ["eager"])
        strongest = torch_bench.SETTINGS["strongest"]
        self.assertEqual((strongest.compile_mode, strongest.bf16, strongest.graph),
                         ("max-autotune-no-cudagraphs", True, True))


if __name__ == "__main__":
    if torch is None:
        print("test_torch_strongest.py: skipped: python3 has no torch")
        sys.exit(77)
    unittest.main()

#!/usr/bin/env python3
"""Tests that spec_torch.py translates every bundled model spec
(models/specs/*.json) into a PyTorch module with exactly Plexus's parameters
(names and shapes) and, with the same weights, the same forward: "mse" and
"bpp" in eval mode (the quantisers round, so both sides are deterministic),
with weights scaled so that the latents are not all rounded to zero.
Plexus's side comes from plexus-spec-probe (lab/bench/spec_probe.cpp) on the
CPU: $PLEXUS_SPEC_PROBE, else build/bin/plexus-spec-probe under the
repository root. Skipped when torch or the probe is missing. Run:
  python3 -m pytest lab/bench/test_torch_translation.py   (or python3 lab/bench/test_torch_translation.py)"""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:
    torch = None

SPECS = sorted(glob.glob(os.path.join(ROOT, "models", "specs", "*.json")))
PROBE = os.environ.get("PLEXUS_SPEC_PROBE", os.path.join(ROOT, "build", "bin", "plexus-spec-probe"))
BATCH, PATCH = 2, 64  # 64: a multiple of every bundled model's stride
# Every convolution weight is scaled by this after initialisation so that the
# latents reach well past +-1/2: rounding, the means and the entropy models'
# tails then take part (at scale 1 nearly every latent rounds to 0).
# cheng2020-attn-mean's residual blocks have no normalisation to hold a
# larger scale back, so it gets less.
WEIGHT_SCALE = {"cheng2020-attn-mean.json": 1.5}
TOLERANCE = 1e-5  # relative; the two sides have agreed to about 1e-7


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (8-byte header length, JSON header, raw data)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {entry['dtype']}, expected F32")
        begin, end = entry["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(entry["shape"])
    return tensors


def pattern_image():
    """The probe's image: element i (row-major) is (i mod 251) / 250."""
    n = BATCH * 3 * PATCH * PATCH
    values = (torch.arange(n, dtype=torch.float64) % 251) / 250
    return values.to(torch.float32).reshape(BATCH, 3, PATCH, PATCH)


@unittest.skipIf(torch is None, "torch is not installed")
@unittest.skipUnless(os.access(PROBE, os.X_OK), f"no plexus-spec-probe at {PROBE} (set PLEXUS_SPEC_PROBE)")
class TranslationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import spec_torch
        cls.spec_torch = spec_torch
        cls.folder = tempfile.mkdtemp()
        cls.probes = {}

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.folder, ignore_errors=True)

    def probe(self, spec_path):
        """Plexus's parameters, mse and bpp for a spec, and the weights it wrote."""
        if spec_path not in self.probes:
            weights = os.path.join(self.folder, os.path.basename(spec_path) + ".safetensors")
            scale = WEIGHT_SCALE.get(os.path.basename(spec_path), 2.0)
            out = subprocess.run([PROBE, "--spec", spec_path, "--weights", weights, "--batch", str(BATCH),
                                  "--patch", str(PATCH), "--weight-scale", str(scale)],
                                 capture_output=True, text=True, check=True)
            self.probes[spec_path] = (json.loads(out.stdout), weights)
        return self.probes[spec_path]

    def translated(self, spec_path):
        spec = self.spec_torch.load_spec(spec_path)
        return spec, self.spec_torch.SpecModel(spec)

    def test_every_spec_has_plexus_parameters(self):
        self.assertGreaterEqual(len(SPECS), 9)  # the glob found the bundled specs
        for spec_path in SPECS:
            with self.subTest(spec=os.path.basename(spec_path)):
                plexus, _ = self.probe(spec_path)
                _, model = self.translated(spec_path)
                names = {name: list(p.shape) for name, p in model.named_plexus_parameters()}
                self.assertEqual(names, plexus["parameters"])

    def test_every_spec_computes_plexus_losses_from_the_same_weights(self):
        for spec_path in SPECS:
            with self.subTest(spec=os.path.basename(spec_path)):
                plexus, weights = self.probe(spec_path)
                spec, model = self.translated(spec_path)
                state = {"layers." + name: value for name, value in read_safetensors(weights).items()}
                model.load_state_dict(state, strict=True)
                model.eval()
                inputs = {"image": pattern_image()}
                levels = self.spec_torch.rate_levels(spec)
                if levels:  # as the probe: image n at level n mod K, MSE weight 1
                    inputs["level"] = torch.tensor([float(n % levels) for n in range(BATCH)])
                    inputs["mse_weight"] = torch.ones(BATCH)
                with torch.no_grad():
                    blobs = model(**inputs)
                self.assertGreater(plexus["bpp"], 1.0)  # the latents are not all rounded to 0
                self.assertAlmostEqual(blobs["mse"].item() / plexus["mse"], 1.0, delta=TOLERANCE)
                self.assertAlmostEqual(blobs["bpp"].item() / plexus["bpp"], 1.0, delta=TOLERANCE)

    def losses_with_weights(self, spec_path, change=None):
        """mse and bpp of the translation of a spec with the probe's weights, `change`d first."""
        _, weights = self.probe(spec_path)
        _, model = self.translated(spec_path)
        state = {"layers." + name: value for name, value in read_safetensors(weights).items()}
        if change:
            change(state)
        model.load_state_dict(state, strict=True)
        model.eval()
        with torch.no_grad():
            blobs = model(image=pattern_image())
        return blobs["mse"].item(), blobs["bpp"].item()

    def test_the_tolerances_see_a_small_change_of_one_weight(self):
        # A guard on the check above: nudging one parameter (the last synthesis
        # bias by 0.001, the entropy model's last bias by 0.01) moves a loss by
        # more than the tolerance.
        spec_path = os.path.join(ROOT, "models", "specs", "bmshj2018-factorized.json")
        plexus, _ = self.probe(spec_path)

        def nudge_synthesis(state):
            state["layers.g_s3.bias"] += 0.001

        def nudge_entropy_model(state):
            state["layers.entropy_model.bias3"] += 0.01

        mse, _ = self.losses_with_weights(spec_path, nudge_synthesis)
        self.assertGreater(abs(mse / plexus["mse"] - 1.0), TOLERANCE)
        _, bpp = self.losses_with_weights(spec_path, nudge_entropy_model)
        self.assertGreater(abs(bpp / plexus["bpp"] - 1.0), TOLERANCE)


def small_case(name, **fields):
    """A bench_cases.json model entry, at batch 2 of 64x64 for the CPU."""
    return dict({"name": name, "spec": os.path.join(ROOT, "models", "specs", name + ".json"), "batch": BATCH,
                 "patch": PATCH, "lambda": 0.01}, **fields)


@unittest.skipIf(torch is None, "torch is not installed")
class BenchStepTest(unittest.TestCase):
    """torch_bench's training steps, eager on the CPU: each returns a finite
    loss and moves the parameters."""

    def check_steps(self, step, parameters):
        before = [p.detach().clone() for p in parameters]
        losses = [step().item() for _ in range(2)]
        for loss in losses:
            self.assertTrue(math.isfinite(loss), losses)
        self.assertTrue(any(not torch.equal(b, p) for b, p in zip(before, parameters)))

    def test_the_spec_step_of_each_kind_of_model(self):
        import torch_bench
        cases = (small_case("bmshj2018-factorized"), small_case("minnen2020-channel"),
                 small_case("mbt2018-mean-vr", lambdas=[0.0018, 0.0035, 0.0067, 0.013, 0.025, 0.0483]))
        for m in cases:
            with self.subTest(model=m["name"]):
                torch.manual_seed(0)
                step = torch_bench.spec_step(m, "f32", "eager", torch.device("cpu"))
                params = [p for group in self.optimiser_of(step).param_groups for p in group["params"]]
                self.check_steps(step, params)

    def test_the_cases_of_layers_v2_at_small_sizes(self):
        # tcm-small at 64x64 (its stride) and every one-layer case (an inline spec, 192 channels, the loss "mse"
        # alone) at 16x16, a multiple of the attention's window of 8.
        import torch_bench
        with open(os.path.join(HERE, "layers_v2_cases.json")) as f:
            cases = json.load(f)["models"]
        self.assertEqual(len(cases), 7)
        for m in cases:
            with self.subTest(case=m["name"]):
                small = dict(m, batch=BATCH, patch=PATCH if m["name"] == "tcm-small" else 16)
                if isinstance(m["spec"], str):
                    small["spec"] = os.path.join(ROOT, m["spec"])
                torch.manual_seed(0)
                step = torch_bench.spec_step(small, "f32", "eager", torch.device("cpu"))
                cells = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))
                self.assertEqual(cells["run"].rate, "step_loss" not in m)  # eager: run is the loss module
                params = [p for group in self.optimiser_of(step).param_groups for p in group["params"]]
                self.check_steps(step, params)

    def test_a_variable_rate_case_weighs_mse_by_the_mean_lambda(self):
        import torch_bench
        # mean(0.001, 0.003) = 0.002, as plexus-bench's variable_rate_lambda.
        self.assertAlmostEqual(torch_bench.case_lambda({"lambdas": [0.001, 0.003]}), 0.002)
        self.assertEqual(torch_bench.case_lambda({"lambda": 0.01}), 0.01)

    def test_the_compressai_steps(self):
        import torch_bench
        try:
            import compressai.models as models
        except ImportError as e:
            self.skipTest(f"compressai is not importable: {e}")
        for name in torch_bench.COMPRESSAI_TWINS:
            with self.subTest(model=name):
                torch.manual_seed(0)
                step = torch_bench.compressai_step(models, small_case(name), "f32", False, torch.device("cpu"))
                params = [p for group in self.optimiser_of(step).param_groups for p in group["params"]]
                self.check_steps(step, params)

    def test_the_compressai_twins_differ_from_the_specs_only_in_the_entropy_bottleneck(self):
        # CompressAI's EntropyBottleneck has filters (3, 3, 3, 3), the specs'
        # FactorizedEntropyModel (3, 3, 3): per channel, matrices 3+9+9+9+3 = 33
        # against 3+9+9+3 = 24, biases 3+3+3+3+1 = 13 against 10, factors 12
        # against 9, so 58 - 43 = 15 parameters more per channel of the
        # bottleneck: 15 * 192 (M) for the factorized prior, 15 * 128 (N) for
        # the hyperpriors. Everything else has the same count.
        import spec_torch
        import torch_bench
        try:
            import compressai.models as models
        except ImportError as e:
            self.skipTest(f"compressai is not importable: {e}")
        extra = {"bmshj2018-factorized": 2880, "bmshj2018-hyperprior": 1920, "mbt2018-mean": 1920}
        self.assertEqual(set(extra), set(torch_bench.COMPRESSAI_TWINS))
        for name, (cls, n, latent) in torch_bench.COMPRESSAI_TWINS.items():
            with self.subTest(model=name):
                twin = getattr(models, cls)(n, latent)
                count = sum(p.numel() for k, p in twin.named_parameters() if not k.endswith(".quantiles"))
                spec = spec_torch.SpecModel(spec_torch.load_spec(small_case(name)["spec"]))
                self.assertEqual(count - sum(p.numel() for p in spec.parameters()), extra[name])

    @staticmethod
    def optimiser_of(step):
        """The main Adam optimiser a step function closes over."""
        cells = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))
        return cells["opt"]


if __name__ == "__main__":
    if torch is None:
        print("test_torch_translation: skipped, torch is not installed")
        sys.exit(77)  # ctest's skip code (tests/CMakeLists.txt)
    unittest.main()

#!/usr/bin/env python3
"""The committed specs are what their builders (models/builders/) write: each builder is run and its
output compared, as parsed JSON, with the committed file; a failure names the first differing path.
Every bundled spec (models/specs/*.json) must have a builder here. python3's standard library only."""
import json
import os
import pathlib
import subprocess
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILDERS = ROOT / "models" / "builders"

# (builder and its arguments, the committed spec it writes), as the builders' usage lines say.
BUILDS = [
    (["make_bmshj2018.py", "--bls2017"], "models/specs/bls2017.json"),
    (["make_bmshj2018.py"], "models/specs/bmshj2018-factorized.json"),
    (["make_bmshj2018.py", "--hyperprior"], "models/specs/bmshj2018-hyperprior.json"),
    (["make_mbt2018_mean.py"], "models/specs/mbt2018-mean.json"),
    (["make_mbt2018_mean.py", "--checkerboard"], "models/specs/checkerboard-mean-scale.json"),
    (["make_mbt2018_mean.py", "--autoregressive"], "models/specs/mbt2018.json"),
    (["make_mbt2018_mean_vr.py"], "models/specs/mbt2018-mean-vr.json"),
    (["make_cheng2020_attn_mean.py"], "models/specs/cheng2020-attn-mean.json"),
    (["make_elic.py"], "models/specs/elic.json"),
    (["make_minnen2020_channel.py"], "models/specs/minnen2020-channel.json"),
    (["make_tcm_small.py"], "models/specs/tcm-small.json"),
    (["make_tiny_channel.py"], "tests/apps/models/tiny_channel.json"),
    (["make_mbt2018_mean_vr.py", "--base", "tests/apps/models/tiny_mean_scale.json", "--name", "tiny-mean-scale-vr",
      "--lambdas", "0.005,0.01,0.02"], "tests/apps/models/tiny_mean_scale_vr.json"),
]


def first_difference(committed, built, path="$"):
    """The first path at which two parsed JSON values differ and how, or None where they are equal."""
    if type(committed) is not type(built):
        return f"{path}: committed {json.dumps(committed)}, built {json.dumps(built)}"
    if isinstance(committed, dict):
        for key in committed:
            if key not in built:
                return f"{path}.{key}: in the committed spec, not in the built one"
            difference = first_difference(committed[key], built[key], f"{path}.{key}")
            if difference:
                return difference
        for key in built:
            if key not in committed:
                return f"{path}.{key}: in the built spec, not in the committed one"
        return None
    if isinstance(committed, list):
        for i, (a, b) in enumerate(zip(committed, built)):
            difference = first_difference(a, b, f"{path}[{i}]")
            if difference:
                return difference
        if len(committed) != len(built):
            return f"{path}: committed has {len(committed)} entries, built {len(built)}"
        return None
    if committed != built:
        return f"{path}: committed {json.dumps(committed)}, built {json.dumps(built)}"
    return None


class FirstDifferenceTest(unittest.TestCase):
    def test_equal_values_have_none(self):
        self.assertIsNone(first_difference({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "c"}]}))

    def test_names_the_first_differing_path(self):
        committed = {"nodes": [{"name": "g_a0", "params": {"kernel": 5}}, {"name": "g_a1"}]}
        built = {"nodes": [{"name": "g_a0", "params": {"kernel": 3}}, {"name": "g_a2"}]}
        self.assertEqual(first_difference(committed, built), "$.nodes[0].params.kernel: committed 5, built 3")

    def test_missing_keys_and_entries(self):
        self.assertEqual(first_difference({"a": 1, "b": 2}, {"a": 1}),
                         "$.b: in the committed spec, not in the built one")
        self.assertEqual(first_difference({"a": 1}, {"a": 1, "c": 3}),
                         "$.c: in the built spec, not in the committed one")
        self.assertEqual(first_difference([1, 2], [1, 2, 3]), "$: committed has 2 entries, built 3")

    def test_types_differ(self):
        self.assertEqual(first_difference({"k": 1}, {"k": "1"}), '$.k: committed 1, built "1"')


class CommittedSpecsTest(unittest.TestCase):
    def test_every_bundled_spec_has_a_builder(self):
        built = {spec for _, spec in BUILDS}
        for spec in sorted((ROOT / "models" / "specs").glob("*.json")):
            self.assertIn(spec.relative_to(ROOT).as_posix(), built,
                          f"{spec.name} has no builder in models/builders/ listed in {pathlib.Path(__file__).name}")

    def test_committed_specs_equal_their_builders_output(self):
        for command, spec in BUILDS:
            with self.subTest(spec=spec):
                run = subprocess.run([sys.executable, str(BUILDERS / command[0])] + command[1:], cwd=ROOT,
                                     capture_output=True, text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
                self.assertEqual(run.returncode, 0, f"models/builders/{command[0]} failed: {run.stderr}")
                built = json.loads(run.stdout)
                committed = json.loads((ROOT / spec).read_text())
                difference = first_difference(committed, built)
                self.assertIsNone(difference, f"{spec} is not what models/builders/{' '.join(command)} writes "
                                  f"(edit the builder and run it, not the spec): {difference}")


if __name__ == "__main__":
    unittest.main()

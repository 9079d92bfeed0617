#!/usr/bin/env python3
"""Tests of the headline comparison: lab/bench/headline.py (result files and
table from stand-in timings, and its refusals) and lab/bench/headline.sh (its
argument errors, and one whole run with stand-ins for nvidia-smi, cmake,
plexus-bench and PyTorch). No GPU, no PyTorch: standard library and bash only.
Expected values are worked out by hand in the comments, not taken from the code.
Run:  python3 lab/bench/test_headline.py"""
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import headline  # noqa: E402

SCHEMA = ("claim", "device", "commit", "command", "date", "results")
CASES = {"layers": [], "models": [{"name": "bls2017", "spec": "models/specs/bls2017.json", "batch": 16, "patch": 256,
                                   "lambda": 0.01},
                                  {"name": "bmshj2018-factorized", "spec": "models/specs/bmshj2018-factorized.json",
                                   "batch": 16, "patch": 256, "lambda": 0.01}]}


def plexus_rows(name, rates, flops_by_node):
    rows = [{"kind": "train_step", "name": name, "step_ms": 9.0, "images_per_s": 1.0, "precision": "bf16"}]
    rows += [{"kind": "train_step_graph", "name": name, "step_ms": 16000.0 / r, "images_per_s": r,
              "peak_bytes": 512 * 2 ** 20, "precision": "bf16"} for r in rates]
    rows += [{"kind": "profile", "model": name, "node": node, "type": "Conv2d", "flops": f}
             for node, f in flops_by_node.items()]
    return rows


def torch_rows(name, setting, rates, busy_ms=None):
    rows = []
    for i, r in enumerate(rates):
        row = {"kind": "train_step", "name": name, "framework": "pytorch", "setting": setting,
               "step_ms": 16000.0 / r, "images_per_s": r, "peak_bytes": 1024 * 2 ** 20, "precision": "bf16"}
        if busy_ms:
            row["gpu_busy_step_ms"] = busy_ms[i]
        rows.append(row)
    return rows


def ceiling(best):
    return {"kind": "ceiling", "name": "matmul 8192^3", "ms": 1.0, "tflops": best - 20, "best_ms": 1.0,
            "best_tflops": best, "precision": "bf16"}


# bls2017: Plexus rounds 1000, 1280, 1100 (fastest 1280, median 1100); strongest 800, 750, 600 (fastest 800);
# compile 300, 400, 350; eager 100, 90, 110 with GPU busy 20, 16, 25 ms. FLOPs 2e11 + 1e11 + 0 = 3e11 a step.
# Peak: the largest fastest-repeat of the ceiling rows, 750.
BLS_PLEXUS = plexus_rows("bls2017", (1000.0, 1280.0, 1100.0), {"g_a0": 2e11, "g_s0": 1e11, "noise": 0.0})
HOW = {"compile_mode": "max-autotune-no-cudagraphs", "adam": "fused, capturable", "cuda_graph": "whole step",
       "timed_steps": 50}
BLS_TORCH = ([dict(r, **HOW) for r in torch_rows("bls2017", "strongest", (800.0, 750.0, 600.0))]
             + torch_rows("bls2017", "compile", (300.0, 400.0, 350.0))
             + torch_rows("bls2017", "eager", (100.0, 90.0, 110.0), busy_ms=(20.0, 16.0, 25.0)))
CEILINGS = [ceiling(700.0), ceiling(750.0), ceiling(740.0)]


class Run(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)

    def lines(self, name, rows):
        path = os.path.join(self.folder, name)
        with open(path, "w") as f:
            f.write("== round 1 of 3\n")  # not a JSON line: skipped
            for row in rows:
                f.write(json.dumps(row) + "\n")
        return path

    def cases(self, cases=CASES):
        path = os.path.join(self.folder, "cases.json")
        with open(path, "w") as f:
            json.dump(cases, f)
        return path

    def write(self, plexus, torch, cases=CASES, extra=()):
        """headline.py write: (exit code, stdout, stderr); the files go to <folder>/speed."""
        argv = ["write", "--plexus", self.lines("plexus.jsonl", plexus), "--torch", self.lines("torch.jsonl", torch),
                "--cases", self.cases(cases), "--out", os.path.join(self.folder, "speed"),
                "--device", "NVIDIA H200", "--commit", "abc1234", "--command", "bash lab/bench/headline.sh",
                "--date", "2026-12-05", *extra]
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = headline.main(argv)
        return code, out.getvalue(), err.getvalue()

    def result(self, model):
        with open(os.path.join(self.folder, "speed", model + ".json")) as f:
            return json.load(f)


class WriteTest(Run):
    def test_a_model_gets_every_round_the_fastest_and_the_ratios(self):
        code, table, err = self.write(BLS_PLEXUS, BLS_TORCH + CEILINGS, cases={"models": CASES["models"][:1]})
        self.assertEqual((code, err), (0, ""))
        doc = self.result("bls2017")
        for key in SCHEMA:
            self.assertIn(key, doc)
        self.assertEqual((doc["device"], doc["commit"], doc["command"], doc["date"]),
                         ("NVIDIA H200", "abc1234", "bash lab/bench/headline.sh", "2026-12-05"))
        self.assertEqual((doc["flops_per_step"], doc["bf16_matmul_peak_tflops"], doc["rounds"]), (3e11, 750.0, 3))
        rows = {r["setting"]: r for r in doc["results"]}
        self.assertEqual([r["setting"] for r in doc["results"]], ["cuda-graph", "strongest", "compile", "eager"])
        plexus = rows["cuda-graph"]
        self.assertEqual(plexus["images_per_s"], [1000.0, 1280.0, 1100.0])
        self.assertEqual((plexus["images_per_s_fastest"], plexus["images_per_s_median"]), (1280.0, 1100.0))
        # 1280 / 800 = 1.6; median 1100 / 800 = 1.375.
        self.assertEqual((plexus["vs_strongest"], plexus["median_vs_strongest"]), (1.6, 1.375))
        # 3e11 FLOPs * 1280 img/s / 16 = 24e12 FLOP/s: 24 TFLOP/s, 24 / 750 = 0.032 of the peak.
        self.assertEqual((plexus["tflops"], plexus["peak_fraction"]), (24.0, 0.032))
        self.assertEqual(plexus["peak_mib"], 512)
        strongest = rows["strongest"]
        # 800 / 800 = 1; 3e11 * 800 / 16 = 15 TFLOP/s, 15 / 750 = 0.02.
        self.assertEqual((strongest["images_per_s_fastest"], strongest["vs_strongest"]), (800.0, 1.0))
        self.assertEqual((strongest["tflops"], strongest["peak_fraction"]), (15.0, 0.02))
        self.assertNotIn("images_per_s_median", strongest)
        self.assertEqual({k: strongest[k] for k in HOW}, HOW)  # how it ran, carried from torch_bench.py's rows
        # compile: fastest 400, 400 / 800 = 0.5; eager: fastest 110, 110 / 800 = 0.1375.
        self.assertEqual((rows["compile"]["images_per_s_fastest"], rows["compile"]["vs_strongest"]), (400.0, 0.5))
        self.assertEqual((rows["eager"]["images_per_s_fastest"], rows["eager"]["vs_strongest"]), (110.0, 0.138))
        # eager's GPU-bound rate: the shortest busy time, 16 ms, for a batch of 16: 1000 img/s.
        self.assertEqual(rows["eager"]["gpu_bound_images_per_s"], 1000.0)
        self.assertNotIn("gpu_bound_images_per_s", rows["compile"])
        self.assertIn("1.60x", doc["claim"])
        self.assertIn("NVIDIA H200", doc["claim"])
        # The table: thousands grouped; 3e11 FLOPs = 300.0 GFLOP; 24 TFLOP/s = 3% and 15 = 2% of 750.
        self.assertIn("| bls2017 | 1,280 | 800 | **1.60x** | 400 | 110 | 300.0 | 24 (3%) | 15 (2%) |", table)
        self.assertIn("fastest of 3 rounds", table)
        self.assertIn("750 TFLOP/s", table)

    def test_the_file_is_small_and_the_table_prints_again_from_it(self):
        self.write(BLS_PLEXUS, BLS_TORCH + CEILINGS, cases={"models": CASES["models"][:1]})
        path = os.path.join(self.folder, "speed", "bls2017.json")
        with open(path) as f:
            self.assertLess(len(f.readlines()), 300)
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(headline.main(["table", path]), 0)
        self.assertIn("| bls2017 | 1,280 | 800 | **1.60x** |", out.getvalue())

    def test_a_model_without_the_strongest_setting_is_named_and_the_others_are_written(self):
        factorized = plexus_rows("bmshj2018-factorized", (500.0,), {"g_a0": 1e11})
        factorized_torch = torch_rows("bmshj2018-factorized", "compile", (300.0,))
        code, table, err = self.write(BLS_PLEXUS + factorized, BLS_TORCH + factorized_torch + CEILINGS)
        self.assertEqual(code, 1)
        self.assertIn("bmshj2018-factorized: no PyTorch 'strongest' rows", err)
        self.assertTrue(os.path.exists(os.path.join(self.folder, "speed", "bls2017.json")))
        self.assertFalse(os.path.exists(os.path.join(self.folder, "speed", "bmshj2018-factorized.json")))
        self.assertIn("| bls2017 |", table)

    def test_a_missing_setting_of_context_leaves_a_dash(self):
        torch = torch_rows("bls2017", "strongest", (800.0,)) + CEILINGS
        code, table, _ = self.write(BLS_PLEXUS, torch, cases={"models": CASES["models"][:1]})
        self.assertEqual(code, 0)
        self.assertIn("| bls2017 | 1,280 | 800 | **1.60x** | - | - |", table)

    def test_no_profile_rows_no_flop_count(self):
        plexus = [r for r in BLS_PLEXUS if r["kind"] != "profile"]
        code, _, err = self.write(plexus, BLS_TORCH + CEILINGS, cases={"models": CASES["models"][:1]})
        self.assertEqual(code, 1)
        self.assertIn("bls2017: no plexus-bench --profile rows", err)

    def test_no_plexus_graph_rows(self):
        plexus = [r for r in BLS_PLEXUS if r["kind"] != "train_step_graph"]
        code, _, err = self.write(plexus, BLS_TORCH + CEILINGS, cases={"models": CASES["models"][:1]})
        self.assertEqual(code, 1)
        self.assertIn("bls2017: no plexus-bench train_step_graph rows", err)

    def test_no_bf16_ceiling(self):
        f32 = dict(ceiling(750.0), precision="f32")
        code, _, err = self.write(BLS_PLEXUS, BLS_TORCH + [f32], cases={"models": CASES["models"][:1]})
        self.assertEqual(code, 1)
        self.assertIn("no bf16 matmul ceiling row", err)

    def test_a_line_that_is_not_json_is_named_by_file_and_line(self):
        path = self.lines("torch.jsonl", CEILINGS)
        with open(path, "a") as f:
            f.write("{\"kind\": \"train_step\", \n")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = headline.main(["write", "--plexus", self.lines("plexus.jsonl", BLS_PLEXUS), "--torch", path,
                                  "--cases", self.cases(), "--out", self.folder, "--device", "d", "--commit", "c",
                                  "--command", "x"])
        self.assertEqual(code, 1)
        self.assertIn("torch.jsonl:5: not JSON", err.getvalue())  # a comment line, three ceilings, then it

    def test_only_keeps_the_models_named(self):
        code, table, err = self.write(BLS_PLEXUS, BLS_TORCH + CEILINGS, extra=("--only", "bls"))
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(os.listdir(os.path.join(self.folder, "speed")), ["bls2017.json"])
        code, _, err = self.write(BLS_PLEXUS, BLS_TORCH + CEILINGS, extra=("--only", "cheng"))
        self.assertEqual(code, 1)
        self.assertIn("has 'cheng' in its name", err)

    def test_a_cases_file_without_models_is_named(self):
        code, _, err = self.write(BLS_PLEXUS, BLS_TORCH + CEILINGS, cases="not a cases object")
        self.assertEqual(code, 1)
        self.assertIn("cases.json: no \"models\"", err)

    def test_a_missing_input_file_is_named(self):
        missing = os.path.join(self.folder, "no-such.jsonl")
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = headline.main(["write", "--plexus", missing, "--torch", self.lines("torch.jsonl", CEILINGS),
                                  "--cases", self.cases(), "--out", self.folder, "--device", "d", "--commit", "c",
                                  "--command", "x"])
        self.assertEqual(code, 1)
        self.assertIn(f"cannot read {missing}", err.getvalue())

    def test_a_bad_date_is_refused(self):
        argv = ["write", "--plexus", "p.jsonl", "--torch", "t.jsonl", "--cases", "c.json", "--out", self.folder,
                "--device", "d", "--commit", "c", "--command", "x", "--date", "5 Dec"]
        with redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
            headline.main(argv)
        self.assertEqual(exit_.exception.code, 2)
        self.assertIn("--date must be YYYY-MM-DD, got '5 Dec'", err.getvalue())

    def test_table_refuses_a_file_that_is_not_a_headline_result(self):
        path = os.path.join(self.folder, "other.json")
        with open(path, "w") as f:
            json.dump({"claim": "x", "results": [{"setting": "eager"}]}, f)
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            self.assertEqual(headline.main(["table", path]), 1)
        self.assertIn("other.json: not a headline result", err.getvalue())


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


# Stand-ins for headline.sh. Each appends its name (and arguments) to $CALLS, so the
# test sees the order of the sides; the n-th call of a side prints the n-th rate of its list.
NVIDIA_SMI = "#!/usr/bin/env bash\necho 'NVIDIA H200'\n"
CMAKE = "#!/usr/bin/env bash\necho \"cmake $*\" >> \"$CALLS\"\n"
PLEXUS_BENCH = r"""#!/usr/bin/env bash
echo "plexus $*" >> "$CALLS"
n=$(grep -c '^plexus' "$CALLS")
rates=(1000 1280 1100)
echo '{"kind": "train_step", "name": "bls2017", "step_ms": 20, "images_per_s": 800, "precision": "bf16"}'
graph='"kind": "train_step_graph", "name": "bls2017", "step_ms": 1, "precision": "bf16"'
echo "{$graph, \"images_per_s\": ${rates[n-1]}}"
if [[ " $* " == *" --profile "* ]]; then
  echo '{"kind": "profile", "model": "bls2017", "node": "g_a0", "type": "Conv2d", "flops": 2e11}'
  echo '{"kind": "profile", "model": "bls2017", "node": "g_s0", "type": "ConvTranspose2d", "flops": 1e11}'
fi
"""
# PYTHON: answers headline.sh's check for PyTorch, stands in for torch_bench.py, runs headline.py for real.
PYTHON = r"""#!/usr/bin/env bash
[ "$1" = "-c" ] && exit 0
case "$1" in
  *torch_bench.py)
    echo "torch $*" >> "$CALLS"
    n=$(grep -c '^torch' "$CALLS")
    strongest=(800 750 600)
    echo '{"kind": "ceiling", "name": "matmul 8192^3", "tflops": 700, "best_tflops": 750, "precision": "bf16"}'
    step='"kind": "train_step", "name": "bls2017", "framework": "pytorch", "precision": "bf16"'
    for s in eager compile; do
      echo "{$step, \"setting\": \"$s\", \"images_per_s\": 100}"
    done
    echo "{$step, \"setting\": \"strongest\", \"images_per_s\": ${strongest[n-1]}}"
    echo "torch_bench: a note on stderr" >&2
    ;;
  *) exec python3 "$@" ;;
esac
"""


class HeadlineScriptTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)
        tools = os.path.join(self.folder, "tools")
        os.makedirs(tools)
        self.build = os.path.join(self.folder, "build")
        os.makedirs(os.path.join(self.build, "bin"))
        executable(os.path.join(tools, "nvidia-smi"), NVIDIA_SMI)
        executable(os.path.join(tools, "cmake"), CMAKE)
        executable(os.path.join(self.build, "bin", "plexus-bench"), PLEXUS_BENCH)
        executable(os.path.join(tools, "python"), PYTHON)
        self.calls_path = os.path.join(self.folder, "calls.txt")
        self.env = dict(os.environ, PATH=tools + os.pathsep + os.environ["PATH"], CALLS=self.calls_path,
                        BUILD=self.build, OUT=os.path.join(self.folder, "logs"),
                        PYTHON=os.path.join(tools, "python"))
        self.cases = os.path.join(self.folder, "cases.json")
        with open(self.cases, "w") as f:
            json.dump({"models": CASES["models"][:1]}, f)

    def run_script(self, *args):
        return subprocess.run(["bash", os.path.join(HERE, "headline.sh"), *args], env=self.env,
                              capture_output=True, text=True, timeout=60)

    def calls(self):
        if not os.path.exists(self.calls_path):
            return []
        with open(self.calls_path) as f:
            return [line.split()[0] for line in f]

    def test_rounds_alternate_and_each_model_gets_its_file(self):
        results = os.path.join(self.folder, "speed")
        run = self.run_script("--cases", self.cases, "--results", results)
        self.assertEqual(run.returncode, 0, run.stderr)
        # Configure, build, then round 1 Plexus first, round 2 PyTorch first, round 3 Plexus first.
        self.assertEqual(self.calls(), ["cmake", "cmake", "plexus", "torch", "torch", "plexus", "plexus", "torch"])
        with open(self.calls_path) as f:
            lines = f.read().splitlines()
        self.assertIn("-DPLEXUS_BUILD_BENCH=ON", lines[0])
        self.assertIn("--target plexus-bench", lines[1])
        plexus_calls = [line for line in lines if line.startswith("plexus")]
        self.assertEqual([" --profile" in line for line in plexus_calls], [True, False, False])  # round 1 only
        self.assertTrue(all("--precision bf16" in line for line in plexus_calls))
        torch_calls = [line for line in lines if line.startswith("torch")]
        self.assertTrue(all("--setting eager,compile,strongest" in line and "--span" in line and "--adam fused" in line
                            and "--precision bf16" in line for line in torch_calls))
        with open(os.path.join(results, "bls2017.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["device"], "NVIDIA H200")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        self.assertTrue(doc["commit"].startswith(head.stdout.strip()), doc["commit"])
        self.assertEqual(doc["command"], f"bash lab/bench/headline.sh --cases {self.cases} --results {results}")
        plexus = doc["results"][0]
        # Plexus 1000, 1280, 1100 against strongest 800, 750, 600: 1280 / 800 = 1.6.
        self.assertEqual((plexus["images_per_s"], plexus["vs_strongest"]), ([1000.0, 1280.0, 1100.0], 1.6))
        self.assertEqual(doc["flops_per_step"], 3e11)
        self.assertIn("| bls2017 | 1,280 | 800 | **1.60x** |", run.stdout)
        with open(os.path.join(self.folder, "logs", "table.md")) as f:
            self.assertIn("| bls2017 | 1,280 |", f.read())

    def test_only_goes_to_both_sides_and_to_the_files(self):
        with open(self.cases, "w") as f:
            json.dump(CASES, f)  # bls2017 and bmshj2018-factorized; the stand-ins time bls2017 alone
        results = os.path.join(self.folder, "speed")
        run = self.run_script("--cases", self.cases, "--results", results, "--rounds", "1", "--only", "bls")
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(self.calls_path) as f:
            sides = [line for line in f if line.startswith(("plexus", "torch"))]
        self.assertEqual(len(sides), 2)
        self.assertTrue(all("--only bls" in line for line in sides))
        self.assertEqual(os.listdir(results), ["bls2017.json"])

    def test_a_model_left_without_rows_fails_the_run(self):
        with open(self.cases, "w") as f:
            json.dump(CASES, f)
        run = self.run_script("--cases", self.cases, "--results", os.path.join(self.folder, "speed"), "--rounds", "1")
        self.assertEqual(run.returncode, 1)
        self.assertIn("bmshj2018-factorized: no plexus-bench train_step_graph rows", run.stderr)

    def test_build_only_builds_and_runs_no_side(self):
        run = self.run_script("--build-only")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(self.calls(), ["cmake", "cmake"])

    def test_a_failed_build_stops_the_run(self):
        executable(os.path.join(self.folder, "tools", "cmake"), CMAKE + "echo 'CMake Error: no CUDA'\nexit 1\n")
        run = self.run_script("--cases", self.cases)
        self.assertEqual(run.returncode, 1)
        self.assertIn("the build failed", run.stderr)
        self.assertIn("CMake Error: no CUDA", run.stderr)
        self.assertEqual(self.calls(), ["cmake"])

    def test_bad_arguments_are_refused_by_name_before_anything_runs(self):
        for args, message in ((("--rounds", "0"), "--rounds must be a whole number >= 1, got '0'"),
                              (("--rounds", "two"), "--rounds must be a whole number >= 1, got 'two'"),
                              (("--timed-steps", "-5"), "--timed-steps must be a whole number >= 1, got '-5'"),
                              (("--rounds",), "--rounds needs a value"),
                              (("--adam", "sgd"), "--adam must be fused or foreach, got 'sgd'"),
                              (("--fast",), "unknown option '--fast'"),
                              (("--cases", "no/such.json"), "no cases file 'no/such.json'")):
            run = self.run_script(*args)
            self.assertEqual(run.returncode, 2, args)
            self.assertIn(message, run.stderr)
        self.assertEqual(self.calls(), [])

    def test_no_gpu_is_said_plainly(self):
        os.remove(os.path.join(self.folder, "tools", "nvidia-smi"))
        self.env["PATH"] = os.path.join(self.folder, "tools") + os.pathsep + "/usr/bin:/bin"
        if shutil.which("nvidia-smi", path=self.env["PATH"]):
            self.skipTest("this machine has nvidia-smi")
        run = self.run_script("--cases", self.cases)
        self.assertEqual(run.returncode, 1)
        self.assertIn("nvidia-smi not found", run.stderr)


LAYERS_V2 = os.path.join(HERE, "layers_v2_cases.json")


class LayersV2CasesTest(unittest.TestCase):
    """layers_v2_cases.json, what headline.sh --cases runs for the layers' speed claims: each case is picked
    alone by --only with its name; its one-layer specs are what the case says (two of one layer, or the
    builder's window-attention block) with the step's loss "mse"."""

    def setUp(self):
        with open(LAYERS_V2) as f:
            self.models = json.load(f)["models"]
        self.by_name = {m["name"]: m for m in self.models}

    def test_only_picks_each_case_alone(self):
        self.assertEqual(len(self.by_name), len(self.models), "two cases share a name")
        for name in self.by_name:
            self.assertEqual([m["name"] for m in self.models if name in m["name"]], [name])
        self.assertEqual(headline.read_cases(LAYERS_V2), self.models)

    def test_tcm_small_is_the_bundled_spec_at_the_headline_size(self):
        m = self.by_name["tcm-small"]
        self.assertEqual((m["spec"], m["batch"], m["patch"]), ("models/specs/tcm-small.json", 16, 256))
        self.assertTrue(os.path.exists(os.path.join(ROOT, m["spec"])))

    def test_layer_cases_are_one_layer_steps_of_16_by_192_by_64_by_64(self):
        layers = {
            "layer-grouped-conv3x3-g4": ("Conv2d", {"kernel": 3, "padding": 1, "groups": 4}),
            "layer-depthwise-conv3x3": ("Conv2d", {"kernel": 3, "padding": 1, "groups": 192}),
            "layer-depthwise-conv5x5": ("Conv2d", {"kernel": 5, "padding": 2, "groups": 192}),
            "layer-dilated-conv3x3-d2": ("Conv2d", {"kernel": 3, "padding": 2, "dilation": 2}),
            "layer-layernorm": ("LayerNorm", {}),
        }
        for name, (kind, params) in layers.items():
            with self.subTest(case=name):
                m = self.by_name[name]
                self.assertEqual((m["batch"], m["channels"], m["patch"], m["step_loss"]), (16, 192, 64, "mse"))
                nodes = m["spec"]["nodes"]
                self.assertEqual(m["spec"]["inputs"], ["image"])
                self.assertEqual([(n["type"], n["inputs"], n["outputs"]) for n in nodes],
                                 [(kind, ["image"], ["h"]), (kind, ["h"], ["out"]),
                                  ("MSELoss", ["out", "image"], ["mse"])])
                for n in nodes[:2]:
                    got = n.get("params", {})
                    self.assertEqual({k: got[k] for k in params}, params)
                    if kind == "Conv2d":  # same size out: 192 channels, stride 1
                        self.assertEqual((got["out_channels"], got.get("stride", 1)), (192, 1))

    def test_the_attention_case_is_the_builders_block(self):
        sys.path.insert(0, os.path.join(ROOT, "models", "builders"))
        from spec_builder import SpecBuilder
        spec = SpecBuilder()
        spec.window_attention_block("block", "image", 192, window=8, heads=6, output="out")
        spec.node("distortion", "MSELoss", ["out", "image"], ["mse"])
        m = self.by_name["layer-window-attention"]
        self.assertEqual((m["batch"], m["channels"], m["patch"], m["step_loss"]), (16, 192, 64, "mse"))
        self.assertEqual(m["spec"]["nodes"], spec.nodes)
        # 6 heads of 32 channels: the scores scaled by 1/sqrt(32)
        scores = [n for n in spec.nodes if n["type"] == "MatMul" and n.get("params", {}).get("transpose_b")]
        self.assertAlmostEqual(scores[0]["params"]["scale"], 32 ** -0.5)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""lab/harness/ without a GPU: its arguments, its layer -> test mapping against the registered layers, the
tests each mode selects, and test, grad, memcheck, perf and ab runs over stand-in binaries (GoogleTest binaries,
compute-sanitizer and plexus-bench as small scripts).
  python3 lab/harness/harness_test.py"""
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HARNESS = os.path.join(HERE, "harness.py")
sys.path.insert(0, HERE)
import targets  # noqa: E402

# A GoogleTest binary: its tests are in STANDIN_TESTS (space-separated); a test whose name has "Skips" skips,
# one with "Fails" fails, one with "Crashes" ends the process. It appends its filter and the environment
# variable STANDIN_SETTING to the file STANDIN_CALLS.
GTEST_STANDIN = r'''#!/usr/bin/env python3
import os, sys
tests = os.environ["STANDIN_TESTS"].split()
if "--gtest_list_tests" in sys.argv:
    suites = {}
    for t in tests:
        suites.setdefault(t.split(".")[0], []).append(t.split(".")[1])
    for suite, names in suites.items():
        print(suite + ".")
        for name in names:
            print("  " + name)
    sys.exit(0)
chosen = [a.split("=", 1)[1].split(":") for a in sys.argv if a.startswith("--gtest_filter=")][0]
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write(f"{os.path.basename(sys.argv[0])} {':'.join(chosen)} {os.environ.get('STANDIN_SETTING', '-')}\n")
failed = 0
for t in chosen:
    print(f"[ RUN      ] {t}")
    if "Crashes" in t:
        sys.exit(134)
    if "Skips" in t:
        print(f"[  SKIPPED ] {t} (0 ms)")
    elif "Fails" in t:
        print(f"[  FAILED  ] {t} (0 ms)")
        failed += 1
    else:
        print(f"[       OK ] {t} (0 ms)")
print("[  PASSED  ] tests." if not failed else f"[  FAILED  ] {failed} tests, listed below:")
if "memory error" in os.environ.get("STANDIN_SETTING", ""):
    print("========= Invalid __global__ read of size 4 bytes")
sys.exit(1 if failed else 0)
'''

# compute-sanitizer --tool memcheck --error-exitcode 99 BINARY ARGS: runs the binary; one error when its
# output reports an invalid read.
SANITIZER_STANDIN = r'''#!/usr/bin/env python3
import subprocess, sys
run = subprocess.run(sys.argv[5:], capture_output=True, text=True)
print(run.stdout, end="")
errors = run.stdout.count("Invalid __global__")
print(f"========= ERROR SUMMARY: {errors} error{'' if errors == 1 else 's'}")
sys.exit(99 if errors else run.returncode)
'''

# plexus-ae train ... --gpus N --out DIR: writes DIR/metrics.jsonl at 100 img/s (side A) or 150 (side B, with
# STANDIN_FAST), times 0.9 N with N > 0 GPUs; appends "side model --gpus N" to STANDIN_CALLS.
TRAIN_STANDIN = r'''#!/usr/bin/env python3
import json, os, sys
arg = lambda name: sys.argv[sys.argv.index(name) + 1]
side = "B" if os.environ.get("STANDIN_FAST") else "A"
gpus = int(arg("--gpus"))
rate = {"A": 100, "B": 150}[side] * (0.9 * gpus if gpus else 1)
os.makedirs(arg("--out"), exist_ok=True)
with open(os.path.join(arg("--out"), "metrics.jsonl"), "w") as f:
    for step in (0, 100, 200):
        f.write(json.dumps({"kind": "train", "step": step, "images_per_second": rate}) + "\n")
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write(f"{side} {arg('--model')} --gpus {gpus}\n")
'''

# cmake: appends its arguments to STANDIN_CALLS; fails when STANDIN_BUILD_FAILS is set.
CMAKE_STANDIN = r'''#!/usr/bin/env python3
import os, sys
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write("cmake " + " ".join(sys.argv[1:]) + "\n")
if os.environ.get("STANDIN_BUILD_FAILS") and "--build" in sys.argv:
    print("error: the compiler stood in for failed")
    sys.exit(1)
'''

# plexus-bench --cases FILE --root ROOT --precision P: a row per case of FILE. The n-th call of a side (its
# name: FIXED_SIDE when set, else "A" without STANDIN_FAST and "B" with it) reports the n-th of its rates and
# times below; every call appends "side cases root precision" to STANDIN_CALLS.
BENCH_STANDIN = r'''#!/usr/bin/env python3
import json, os, sys
FIXED_SIDE = None
arg = lambda name: sys.argv[sys.argv.index(name) + 1]
cases = json.load(open(arg("--cases")))
side = FIXED_SIDE or ("B" if os.environ.get("STANDIN_FAST") else "A")
counter = os.environ["STANDIN_CALLS"] + "." + side
n = len(open(counter).read().split()) if os.path.exists(counter) else 0
open(counter, "a").write("x\n")
names = [c["name"] for c in cases["layers"] + cases["models"]]
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write(f"{side} {','.join(names)} {arg('--root')} {arg('--precision')}\n")
rates = {"A": [100, 90, 120], "B": [150, 160, 140]}[side]
for c in cases["layers"]:
    ms = {"A": 2.0, "B": 1.0}[side]
    print(json.dumps({"kind": "layer", "name": c["name"], "forward_ms": ms, "backward_ms": 2 * ms}))
for m in cases["models"]:
    print(json.dumps({"kind": "train_step", "name": m["name"], "images_per_s": rates[n % 3] / 2,
                      "peak_bytes": 2**20 * (10 if side == "A" else 8)}))
    print(json.dumps({"kind": "train_step_graph", "name": m["name"], "images_per_s": rates[n % 3],
                      "peak_bytes": 2**20 * (10 if side == "A" else 8)}))
'''


def test_names(source):
    """Suite.Name of every TEST(...) of a test source."""
    with open(source, encoding="utf-8") as f:
        return [f"{s}.{n}" for s, n in re.findall(r"^TEST(?:_F)?\(\s*(\w+),\s*(\w+)\)", f.read(), re.M)]


class Arguments(unittest.TestCase):
    def run_harness(self, *words):
        return subprocess.run([sys.executable, HARNESS, *words], capture_output=True, text=True)

    def test_help_answers(self):
        run = self.run_harness("--help")
        self.assertEqual(run.returncode, 0)
        for word in ("test", "grad", "perf", "ab", "--against", "--switch", "--memcheck", "--rounds"):
            self.assertIn(word, run.stdout)

    def test_bad_arguments_are_refused_naming_them(self):
        for words, culprit in ((["bogus", "GDN"], "'bogus'"), (["test", "NoSuchLayer"], "'NoSuchLayer'"),
                               (["test"], "name a target"),
                               (["perf", "elementwise_test"], "'elementwise_test' is a test binary"),
                               (["test", "bls2017"], "'bls2017' is a model"), (["ab", "bls2017"], "--against"),
                               (["ab", "bls2017", "--switch", "NOEQUALS"], "'NOEQUALS'"),
                               (["ab", "bls2017", "--switch", "A=1", "--against", "HEAD"], "exactly one"),
                               (["ab", "bls2017", "--switch", "A=1", "--rounds", "0"], "--rounds"),
                               (["perf", "GDN", "--precision", "fp16"], "'fp16'"),
                               (["perf", "Abs"], "'Abs' has no case"), (["perf", "GDN", "--profile"], "a model"),
                               (["test", "GDN", "--profile"], "--profile"), (["test", "perf", "GDN"], "test perf"),
                               (["test", "GDN", "--cpu", "--memcheck"], "--cpu"),
                               (["test", "GDN", "--env", "1X=2"], "'1X=2'"),
                               (["ab", "bls2017", "--against", "no-such-revision", "--no-build"], "'no-such-revision'"),
                               (["test", "GDN", "--no-such-option"], "--no-such-option")):
            with self.subTest(words=words):
                run = self.run_harness(*words)
                self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
                self.assertIn(culprit, run.stderr)


class LayerMapping(unittest.TestCase):
    def test_every_registered_layer_has_a_test_binary_with_parity_and_gradient_checks(self):
        with open(os.path.join(ROOT, "layers", "builtin_layers.cpp")) as f:
            registered_folders = set(re.findall(r"layers::register_(\w+)\(registry\)", f.read()))
        folders = targets.layer_folders()
        self.assertEqual(set(folders.values()), registered_folders,
                         "the layer types the harness finds come from every folder builtin_layers.cpp registers")
        self.assertGreaterEqual(len(folders), len(registered_folders))
        sources = targets.test_sources()
        for layer_type in folders:
            with self.subTest(layer_type=layer_type):
                tests = test_names(sources[targets.layer_binary(layer_type, folders, sources)])
                grad = targets.select_tests(tests, "grad")
                self.assertTrue([t for t in grad if "Cpu" in t], f"no CPU gradient check among {tests}")
                self.assertTrue([t for t in grad if "Cuda" in t], f"no CUDA gradient check among {tests}")
                self.assertTrue([t for t in targets.select_tests(tests, "test") if "Parity" in t],
                                f"no parity test among {tests}")

    def test_every_layer_test_that_needs_a_gpu_is_named_cuda(self):
        # --cpu and --memcheck pick a layer's CUDA tests by the name: a test that skips without a GPU and is not
        # named *Cuda* would fail --cpu runs and escape memcheck.
        folders, sources = targets.layer_folders(), targets.test_sources()
        for binary in sorted({targets.layer_binary(t, folders, sources) for t in folders}):
            with open(sources[binary], encoding="utf-8") as f:
                bodies = re.split(r"\n(?=TEST(?:_F)?\()", f.read())
            for body in bodies:
                name = re.match(r"TEST(?:_F)?\(\s*(\w+),\s*(\w+)\)", body)
                if name and "cuda_available()" in body:
                    test = f"{name.group(1)}.{name.group(2)}"
                    with self.subTest(test=test):
                        self.assertTrue(fnmatch.fnmatchcase(test, targets.CUDA_PATTERN), f"{binary}: {test}")

    def test_each_mode_selects_its_tests(self):
        tests = ["GDN.ForwardMatchesNaivePerPixelLoop", "GDN.GradientsCpu", "GDN.GradientsCpuWideChannels",
                 "GDN.GradientsCuda", "GDN.TensorCoreParameterGradientsAreDeterministicCuda", "GDN.ParityCpuCuda",
                 "MSELoss.WeightedGradientsCpu", "RateLoss.GradientsOfSeveralLikelihoodInputsCuda",
                 "NetGradientSharing.ParameterGradientsMatchCentralDifferencesCpu", "GradientBuckets.TheLastGradients"]
        self.assertEqual(targets.select_tests(tests, "grad"),
                         ["GDN.GradientsCpu", "GDN.GradientsCpuWideChannels", "GDN.GradientsCuda",
                          "MSELoss.WeightedGradientsCpu", "RateLoss.GradientsOfSeveralLikelihoodInputsCuda",
                          "NetGradientSharing.ParameterGradientsMatchCentralDifferencesCpu"])
        self.assertEqual(targets.select_tests(tests, "test"),
                         ["GDN.ForwardMatchesNaivePerPixelLoop", "GDN.TensorCoreParameterGradientsAreDeterministicCuda",
                          "GDN.ParityCpuCuda", "GradientBuckets.TheLastGradients"])
        self.assertEqual(targets.select_tests(tests, "grad", cpu_only=True),
                         ["GDN.GradientsCpu", "GDN.GradientsCpuWideChannels", "MSELoss.WeightedGradientsCpu",
                          "NetGradientSharing.ParameterGradientsMatchCentralDifferencesCpu"])
        self.assertEqual(targets.select_tests(tests, "test", "*TensorCore*:*Forward*-*Cuda*"),
                         ["GDN.ForwardMatchesNaivePerPixelLoop"])

    def test_layer_targets_pick_exactly_their_benchmark_cases(self):
        picked = targets.resolve_targets(["IGDN", "bls2017"], testing=False, timing=True)
        self.assertEqual([c["name"] for c in picked["layers"]], ["IGDN 128 @64", "IGDN 256 @64"])
        self.assertEqual([m["name"] for m in picked["models"]], ["bls2017"])
        picked = targets.resolve_targets(["GDN", "IGDN", "layers"], testing=True, timing=False)
        self.assertEqual(picked["binaries"].count("gdn_test"), 1)


class StandIns(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp()
        self.calls = os.path.join(self.work, "calls.txt")
        self.standins = os.path.join(self.work, "bin")
        os.makedirs(os.path.join(self.work, "build", "tests"))
        os.makedirs(os.path.join(self.work, "build", "bin"))
        os.makedirs(os.path.join(self.work, "other", "bin"))
        os.makedirs(self.standins)
        self.write(os.path.join(self.work, "build", "tests", "elementwise_test"), GTEST_STANDIN)
        self.write(os.path.join(self.standins, "compute-sanitizer"), SANITIZER_STANDIN)
        for folder in ("build", "other"):
            self.write(os.path.join(self.work, folder, "bin", "plexus-bench"), BENCH_STANDIN)

    def tearDown(self):
        shutil.rmtree(self.work)

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)

    def run_harness(self, *words, tests="", build=False, **env):
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "CUDA_VISIBLE"))}
        environment.update(STANDIN_TESTS=tests, STANDIN_CALLS=self.calls,
                           PATH=self.standins + os.pathsep + os.environ["PATH"], **env)
        where = [] if build else ["--no-build", "--build", os.path.join(self.work, "build")]
        run = subprocess.run([sys.executable, HARNESS, *words, *where, "--logs", os.path.join(self.work, "logs")],
                             capture_output=True, text=True, env=environment)
        self.output = run.stdout + run.stderr
        return run.returncode

    def calls_made(self):
        with open(self.calls) as f:
            return f.read().splitlines()

    def test_the_build_configures_a_new_folder_with_the_benchmarks_and_builds_what_the_run_needs(self):
        self.write(os.path.join(self.standins, "cmake"), CMAKE_STANDIN)
        build = os.path.join(self.work, "build")
        words = ("grad", "ReLU", "--build", build, "--cmake-arg=-DEXTRA=1")
        self.assertEqual(self.run_harness(*words, tests=self.RELU, build=True), 0, self.output)
        self.assertEqual(self.calls_made()[:2], [
            f"cmake -S {ROOT} -B {build} -DPLEXUS_BUILD_BENCH=ON -DEXTRA=1 -G Ninja -DCMAKE_BUILD_TYPE=Release",
            f"cmake --build {build} -j {os.cpu_count()} --target elementwise_test"])
        open(os.path.join(build, "CMakeCache.txt"), "w").close()  # an existing build keeps its generator and type
        os.remove(self.calls)
        self.assertEqual(self.run_harness("perf", "bls2017", "--build", build, build=True), 0, self.output)
        self.assertEqual(self.calls_made()[:2], [f"cmake -S {ROOT} -B {build} -DPLEXUS_BUILD_BENCH=ON",
                                                 f"cmake --build {build} -j {os.cpu_count()} --target plexus-bench"])
        self.assertEqual(self.run_harness(*words, tests=self.RELU, build=True, STANDIN_BUILD_FAILS="1"), 1)
        self.assertIn("error: the compiler stood in for failed", self.output)
        self.assertIn("SUMMARY: build of this tree FAILED", self.output)

    RELU = "ReLU.ForwardMatchesDefinition ReLU.GradientsCpu ReLU.GradientsCuda ReLU.ParityCpuCuda"

    def test_test_and_grad_run_their_tests_and_pass(self):
        self.assertEqual(self.run_harness("test", "grad", "ReLU", tests=self.RELU, STANDIN_SETTING="on"), 0,
                         self.output)
        self.assertIn("elementwise_test test: passed: 2 of 2 passed, 0 failed, 0 skipped", self.output)
        self.assertIn("elementwise_test grad: passed: 2 of 2 passed", self.output)
        self.assertIn("SUMMARY: test and grad: 2 of 2 passed", self.output)
        self.assertEqual(self.calls_made(), ["elementwise_test ReLU.ForwardMatchesDefinition:ReLU.ParityCpuCuda on",
                                             "elementwise_test ReLU.GradientsCpu:ReLU.GradientsCuda on"])

    def test_cpu_leaves_the_cuda_tests_out_and_env_reaches_the_binary(self):
        self.assertEqual(self.run_harness("grad", "elementwise_test", "--cpu", "--env", "STANDIN_SETTING=given",
                                          tests=self.RELU), 0, self.output)
        self.assertEqual(self.calls_made(), ["elementwise_test ReLU.GradientsCpu given"])

    def test_a_skipped_failed_or_missing_test_fails_the_run(self):
        for tests, culprit in (("ReLU.GradientsCpu ReLU.GradientsCudaSkips", "skipped: ReLU.GradientsCudaSkips"),
                               ("ReLU.GradientsCpuFails ReLU.GradientsCuda", "failed: ReLU.GradientsCpuFails"),
                               ("ReLU.GradientsCrashesCpu ReLU.GradientsCuda", "did not run: ReLU.GradientsCuda"),
                               ("ReLU.ForwardMatchesDefinition", "no test selected")):
            with self.subTest(tests=tests):
                self.assertEqual(self.run_harness("grad", "ReLU", tests=tests), 1, self.output)
                self.assertIn(culprit, self.output)
                self.assertIn("SUMMARY: grad: 0 of 1 passed", self.output)

    def test_two_gpu_tests_may_skip_only_with_one_gpu_visible(self):
        tests = "ReLU.ParityCpuCuda ReLU.TwoGpuParitySkips"
        self.assertEqual(self.run_harness("test", "ReLU", tests=tests, CUDA_VISIBLE_DEVICES="3"), 0, self.output)
        self.assertIn("1 skipped (1 two-GPU tests with one GPU visible)", self.output)
        self.assertEqual(self.run_harness("test", "ReLU", tests=tests, CUDA_VISIBLE_DEVICES="0,1"), 1, self.output)
        self.assertIn("skipped: ReLU.TwoGpuParitySkips", self.output)

    def test_memcheck_runs_the_cuda_tests_under_the_sanitizer(self):
        self.assertEqual(self.run_harness("grad", "ReLU", "--memcheck", tests=self.RELU), 0, self.output)
        self.assertIn("memcheck over 1 CUDA tests: clean: ERROR SUMMARY: 0 errors", self.output)
        self.assertEqual(self.calls_made()[-1], "elementwise_test ReLU.GradientsCuda -")
        self.assertEqual(self.run_harness("grad", "ReLU", "--memcheck", tests=self.RELU,
                                          STANDIN_SETTING="memory error"), 1, self.output)
        self.assertIn("memcheck over 1 CUDA tests: FAILED: ERROR SUMMARY: 1 error (exit 99)", self.output)

    def test_perf_times_exactly_the_cases_named(self):
        self.assertEqual(self.run_harness("perf", "IGDN", "bls2017", "--precision", "tf32,bf16"), 0, self.output)
        self.assertEqual(self.calls_made(), [f"A IGDN 128 @64,IGDN 256 @64,bls2017 {ROOT} tf32",
                                             f"A IGDN 128 @64,IGDN 256 @64,bls2017 {ROOT} bf16"])
        self.assertRegex(self.output, r"IGDN 256 @64 +backward +4\.000 ms")
        self.assertRegex(self.output, r"bls2017 +graph step +90 img/s +peak 10 MiB")

    def test_ab_alternates_which_side_goes_first_and_reports_medians_fastest_and_ratios(self):
        self.assertEqual(self.run_harness("ab", "bls2017", "GDN", "--switch", "STANDIN_FAST=1", "--rounds", "3"), 0,
                         self.output)
        sides = [call.split()[0] for call in self.calls_made()]
        self.assertEqual(sides, ["A", "B", "B", "A", "A", "B"])
        self.assertIn("round 2 (bf16): B (STANDIN_FAST=1) first", self.output)
        # A's rates 100, 90, 120 (median 100, fastest 120); B's 150, 160, 140 (median 150, fastest 160).
        self.assertRegex(self.output,
                         r"bls2017 +graph step +100 img/s +150 img/s +1\.500 +120 img/s +160 img/s +1\.333")
        self.assertIn("every round: A 100 img/s, 90 img/s, 120 img/s; B 150 img/s, 160 img/s, 140 img/s", self.output)
        self.assertIn("peak memory: A 10 MiB, B 8 MiB", self.output)
        # Times: A 2 ms, B 1 ms forward: B twice as fast.
        self.assertRegex(self.output, r"GDN 128 @128 +forward +2\.000 ms +1\.000 ms +2\.000")

    def test_ab_against_another_build(self):
        other = os.path.join(self.work, "other")
        for folder, side in (("build", "B"), (other, "A")):
            self.write(os.path.join(self.work, folder, "bin", "plexus-bench"),
                       BENCH_STANDIN.replace("FIXED_SIDE = None", f"FIXED_SIDE = {side!r}"))
        self.assertEqual(self.run_harness("ab", "bls2017", "--against", other, "--rounds", "3"), 0, self.output)
        self.assertEqual([call.split()[0] for call in self.calls_made()], ["A", "B", "B", "A", "A", "B"])
        self.assertIn(f"A = A ({other}), B = B (this build)", self.output)
        self.assertRegex(self.output, r"bls2017 +graph step +100 img/s +150 img/s +1\.500")

    def test_ab_against_a_revision_exports_it_and_times_its_build(self):
        build = os.path.join(self.work, "build")
        started = time.time()
        self.assertEqual(self.run_harness("ab", "bls2017", "--against", "HEAD", "--rounds", "1"), 1, self.output)
        self.assertIn(f"no plexus-bench in {build}-against", self.output)
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        with open(os.path.join(build + "-against-src", ".harness-revision")) as f:
            self.assertEqual(f.read(), head)
        # The export's files are as new as the export, so a build made from an older revision rebuilds them.
        self.assertGreaterEqual(os.path.getmtime(os.path.join(build + "-against-src", "CMakeLists.txt")),
                                int(started))
        os.makedirs(os.path.join(build + "-against", "bin"))
        self.write(os.path.join(build + "-against", "bin", "plexus-bench"),
                   BENCH_STANDIN.replace("FIXED_SIDE = None", "FIXED_SIDE = 'A'"))
        self.assertEqual(self.run_harness("ab", "bls2017", "--against", "HEAD", "--rounds", "1"), 0, self.output)
        self.assertEqual(self.calls_made(), [f"A bls2017 {build}-against-src bf16", f"A bls2017 {ROOT} bf16"])
        self.assertIn(f"A = A (HEAD = {head[:10]})", self.output)

    def test_ab_of_data_parallel_scaling_runs_the_experiment_with_each_sides_plexus_ae(self):
        self.write(os.path.join(self.work, "build", "bin", "plexus-ae"), TRAIN_STANDIN)
        images = os.path.join(self.work, "images")
        os.makedirs(images)
        self.assertEqual(self.run_harness("ab", "bmshj2018-factorized", "--switch", "STANDIN_FAST=1", "--scaling",
                                          images, "--steps", "8", "--rounds", "2", DEVICE="cpu"), 0, self.output)
        self.assertEqual([" ".join(call.split()[::3]) for call in self.calls_made()], ["A 0", "A 1", "B 0", "B 1",
                                                                                      "B 0", "B 1", "A 0", "A 1"])
        self.assertRegex(self.output, r"bmshj2018-factorized +--gpus 0 +100 img/s +150 img/s +1\.500")
        self.assertRegex(self.output, r"bmshj2018-factorized +--gpus 1 +90 img/s +135 img/s +1\.500")
        self.assertRegex(self.output, r"bmshj2018-factorized +1 GPUs vs 1 +0\.900 +0\.900 +1\.000")
        self.assertEqual(self.run_harness("ab", "GDN", "--switch", "X=1", "--scaling", images), 2)
        self.assertIn("--scaling trains models", self.output)

    def test_ab_switch_keeps_env_on_side_a(self):
        self.assertEqual(self.run_harness("ab", "bls2017", "--switch", "STANDIN_FAST=1", "--env", "STANDIN_FAST=",
                                          "--rounds", "1"), 0, self.output)
        self.assertEqual([call.split()[0] for call in self.calls_made()], ["A", "B"])


if __name__ == "__main__":
    unittest.main()

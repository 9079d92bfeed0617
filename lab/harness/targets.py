"""What the harness can run: the registered layer types and their test binaries, the test binaries of tests/,
the benchmark cases of lab/bench/bench_cases.json, and the naming conventions that pick a mode's tests."""
import fnmatch
import glob
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The gradient checks, by the tests' naming convention (GoogleTest patterns on Suite.Name).
GRAD_PATTERNS = ("*.Gradients*", "*.*GradientsCpu*", "*.*GradientsCuda*", "*.*CentralDifferences*")
CUDA_PATTERN = "*Cuda*"  # the tests that need a GPU, by convention
TWO_GPU_PATTERN = "*TwoGpu*"  # the tests that need two GPUs


class UsageError(Exception):
    """A bad argument: the message names it; the harness exits with status 2."""


def layer_folders(root=ROOT):
    """{layer type: its folder under layers/}, from the registrations (registry.add("Type", ...))."""
    types = {}
    for path in sorted(glob.glob(os.path.join(root, "layers", "*", "*.cpp"))):
        with open(path, encoding="utf-8") as source:
            for name in re.findall(r'registry\.add\(\s*"([A-Za-z0-9_]+)"', source.read()):
                types[name] = os.path.basename(os.path.dirname(path))
    return types


def test_sources(root=ROOT):
    """{test binary: its source}, one GoogleTest binary per tests/**/*_test.cpp."""
    sources = {}
    for path in glob.glob(os.path.join(root, "tests", "**", "*_test.cpp"), recursive=True):
        sources[os.path.basename(path)[:-len(".cpp")]] = path
    return sources


def layer_binary(layer_type, folders, sources):
    """The test binary of a layer type: <folder>_test of its folder layers/<folder>/."""
    binary = folders[layer_type] + "_test"
    if binary not in sources:
        raise UsageError(f"layer type '{layer_type}' has no test binary: no tests/layers/{binary}.cpp")
    return binary


def bench_cases(root=ROOT):
    with open(os.path.join(root, "lab", "bench", "bench_cases.json"), encoding="utf-8") as f:
        return json.load(f)


def is_grad(test):
    return any(fnmatch.fnmatchcase(test, p) for p in GRAD_PATTERNS)


def select_tests(tests, mode, user_filter=None, cpu_only=False):
    """The tests of a binary a mode runs: grad its gradient checks, test the others; --filter narrows
    (GoogleTest's syntax: POSITIVE[:...][-NEGATIVE[:...]]); --cpu leaves the CUDA tests out."""
    chosen = [t for t in tests if is_grad(t) == (mode == "grad")]
    if user_filter:
        chosen = [t for t in chosen if matches_gtest_filter(t, user_filter)]
    if cpu_only:
        chosen = [t for t in chosen if not fnmatch.fnmatchcase(t, CUDA_PATTERN)]
    return chosen


def matches_gtest_filter(test, gtest_filter):
    positive, _, negative = gtest_filter.partition("-")
    positives = [p for p in positive.split(":") if p] or ["*"]
    return (any(fnmatch.fnmatchcase(test, p) for p in positives) and
            not any(fnmatch.fnmatchcase(test, p) for p in negative.split(":") if p))


def resolve_targets(targets, testing, timing):
    """test/grad: {binaries: [names]}; perf/ab: {layers: [cases], models: [cases]}."""
    folders, sources, cases = layer_folders(), test_sources(), bench_cases()
    model_names = [m["name"] for m in cases["models"]]
    binaries, layer_cases, model_cases = [], [], []
    for target in targets:
        types = sorted(folders) if target == "layers" else [target] if target in folders else []
        if target == "models" or target in model_names:
            if not timing:
                raise UsageError(f"'{target}' is a model: test and grad take layer types and test binaries "
                                 "(a model's tests: name their binaries, e.g. hyperprior_models_test)")
            model_cases += [m for m in cases["models"] if target in ("models", m["name"])]
        elif types and testing:
            binaries += [layer_binary(t, folders, sources) for t in types]
        elif types:
            found = [c for c in cases["layers"] if c["type"] in types]
            if not found and target != "layers":
                have = sorted({c["type"] for c in cases["layers"]})
                raise UsageError(f"layer type '{target}' has no case in lab/bench/bench_cases.json "
                                 f"(types with cases: {', '.join(have)})")
            layer_cases += found
        elif target in sources and testing:
            binaries.append(target)
        elif target in sources:
            raise UsageError(f"'{target}' is a test binary: perf and ab take layer types and models")
        else:
            raise UsageError(f"unknown target '{target}': not a layer type ({', '.join(sorted(folders))}), "
                             f"a test binary of tests/, or a model ({', '.join(model_names)})")
    unique = lambda items: [x for i, x in enumerate(items) if x not in items[:i]]
    return {"binaries": unique(binaries), "layers": unique(layer_cases), "models": unique(model_cases)}

#!/usr/bin/env python3
"""Writes models/specs/mbt2018-mean-vr.json: mbt2018-mean with gain units.

A variable-rate mean-scale hyperprior: one model for several rate-distortion
trade-offs, through the gain units of Cui, Wang, Gao, Bai, Guo, Feng,
"Asymmetric gained deep image compression with continuous rate adaptation"
(CVPR 2021). mbt2018-mean's analysis gives y; a GainUnit scales each channel
by the gain of the image's rate level (y_g = y * exp(s_level)); the
hyper-analysis, the quantiser and the Gaussian conditional work on y_g; an
inverse GainUnit of its own scales y_hat back before the synthesis. The
model reads "level" [N] (0 = the lowest rate; fractional levels interpolate
the log-gains) and "mse_weight" [N], the third input of its MSELoss.

The gains start at sqrt(lambda_k / geometric mean of the lambdas) (a
quantisation step in y proportional to 1 / sqrt(lambda), what a
high-rate approximation gives), the inverse gains at their reciprocal.

usage: models/builders/make_mbt2018_mean_vr.py [--lambdas 0.0018,...] > models/specs/mbt2018-mean-vr.json
The tests' tiny one: models/builders/make_mbt2018_mean_vr.py --base tests/apps/models/tiny_mean_scale.json \
    --name tiny-mean-scale-vr --lambdas 0.005,0.01,0.02 > tests/apps/models/tiny_mean_scale_vr.json
"""
import argparse
import json
import math
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# CompressAI's qualities 1-6.
DEFAULT_LAMBDAS = [0.0018, 0.0035, 0.0067, 0.013, 0.025, 0.0483]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lambdas", default=",".join(map(str, DEFAULT_LAMBDAS)),
                        help="the rate levels' trade-offs, increasing (they set the initial gains)")
    parser.add_argument("--base", default="models/specs/mbt2018-mean.json",
                        help="the mean-scale spec to add the gain units to (node names as mbt2018-mean's)")
    parser.add_argument("--name", default="mbt2018-mean-vr")
    args = parser.parse_args()
    lambdas = [float(v) for v in args.lambdas.split(",")]
    if len(lambdas) < 2 or any(b <= a for a, b in zip(lambdas, lambdas[1:])):
        parser.error("--lambdas needs two or more increasing values")
    geometric_mean = math.exp(sum(math.log(v) for v in lambdas) / len(lambdas))
    log_gains = [round(0.5 * math.log(v / geometric_mean), 6) for v in lambdas]

    spec = json.loads((ROOT / args.base).read_text())
    base_name = spec["name"] + (" (N=128, M=192)" if spec["name"] == "mbt2018-mean" else "")
    spec["name"] = args.name
    spec["description"] = (
        f"{base_name} as one variable-rate model: gain units (Cui et al., Asymmetric gained deep "
        "image compression with continuous rate adaptation, CVPR 2021) scale the latent y channel by channel by the "
        "gain of each image's rate level before the hyper-analysis and the quantiser (y_g = y * exp(s_level)), and "
        "an inverse gain unit scales y_hat back before the synthesis; fractional levels interpolate the log-gains. "
        f"{len(lambdas)} levels, trained with lambdas {lambdas} (level 0 the lowest rate); inputs \"level\" [N] and "
        "\"mse_weight\" [N] (the MSE's weight per image: lambda_level / mean(lambdas) in training, 1 in eval). "
        "Written by models/builders/make_mbt2018_mean_vr.py.")
    spec["inputs"] = ["image", "level", "mse_weight"]
    nodes = []
    for node in spec["nodes"]:
        if node["name"] == "h_a0":  # the hyper-analysis reads the gained latent
            nodes.append({"name": "gain", "type": "GainUnit", "inputs": ["y", "level"], "outputs": ["y_gained"],
                          "params": {"levels": len(lambdas), "init": log_gains}})
        if node["name"] == "g_s0":  # the synthesis reads y_hat scaled back
            nodes.append({"name": "inverse_gain", "type": "GainUnit", "inputs": ["y_hat", "level"],
                          "outputs": ["y_hat_ungained"],
                          "params": {"levels": len(lambdas), "init": [-g for g in log_gains]}})
        node = dict(node)
        if node["name"] in ("h_a0", "quantizer"):
            node["inputs"] = ["y_gained" if i == "y" else i for i in node["inputs"]]
        if node["name"] == "g_s0":
            node["inputs"] = ["y_hat_ungained"]
        if node["type"] == "MSELoss":
            node["inputs"] = node["inputs"] + ["mse_weight"]
        nodes.append(node)
    spec["nodes"] = nodes
    print(json.dumps(spec, indent=1))


if __name__ == "__main__":
    main()

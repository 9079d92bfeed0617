#!/usr/bin/env python3
"""The summary and verdict of lab/experiments/precision-quality.sh: does training with
BF16 products cost rate-distortion quality against TF32?

Three runs of one model, same data and settings: TF32 seed 1, BF16 seed 1,
TF32 seed 2. Each run folder holds the trainer's metrics.jsonl and the Kodak
evaluation of its final model, kodak/eval.json (`plexus-ae eval --out`).

For each run, on the Kodak images (rounded latent, the entropy model's
estimate of the rate):
  bpp   mean bits per pixel over the images
  PSNR  mean of the per-image PSNRs in dB (the CompressAI convention)
  J     the rate-distortion cost the trainer minimises, J = bpp + lambda *
        255^2 * MSE, MSE on [0, 1] values (apps/autoencoder: distortion_weight;
        the trainer's validation loss is the same: the mean bpp plus the
        weight times the mean of the per-image MSEs). eval.json gives each
        image's PSNR = 10 log10(1 / MSE), so MSE = 10^(-PSNR / 10).
and from training: the steps done, the final training loss (the mean of the
last few logged windows; noisy patches, not Kodak), images/s and seconds.
Image by image: on how many Kodak images each model has the lower J, and the
mean and standard deviation of the per-image differences.

The rule: BF16 costs "no measurable quality" when
  |J_bf16 - J_tf32|  <=  |J_tf32,seed2 - J_tf32,seed1|,
the BF16-TF32 difference at the same seed no larger than the difference two
TF32 seeds make. One seed pair is a single sample of that spread: a rough
yardstick, not a confidence interval.

  python3 lab/experiments/precision_quality.py --lambda 0.01 --steps 16000 \\
      --tf32 runs/q/tf32-seed1 --bf16 runs/q/bf16-seed1 --tf32-seed2 runs/q/tf32-seed2 --out OUT

writes OUT/summary.json and OUT/table.md and prints the table and the verdict.
Standard library only. Tests: lab/experiments/test_precision_quality.py.
"""
import argparse
import json
import math
import os
import sys

PEAK = 255.0
# Training windows averaged for the final training loss.
FINAL_LOSS_WINDOWS = 5

RULE = ("no measurable cost = |J_bf16 - J_tf32| <= |J_tf32,seed2 - J_tf32,seed1| "
        "(J = bpp + lambda * 255^2 * MSE on Kodak, MSE on [0, 1] values)")


def mse_from_psnr(psnr_db):
    """MSE on [0, 1] values of an image whose PSNR is 10 log10(1 / MSE)."""
    return 10.0 ** (-psnr_db / 10.0)


def rd_cost(bpp, mse, lam):
    """The trainer's loss: bpp + lambda * 255^2 * mse (mse on [0, 1] values)."""
    return bpp + lam * PEAK * PEAK * mse


def kodak_result(evaluation, lam):
    """Means over the images of one eval.json, and J from the mean MSE."""
    images = evaluation.get("images") or []
    if not images:
        raise ValueError("eval.json lists no images")
    n = len(images)
    bpp = sum(row["bpp"] for row in images) / n
    psnr = sum(row["psnr"] for row in images) / n
    mse = sum(mse_from_psnr(row["psnr"]) for row in images) / n
    result = {"images": n, "bpp": bpp, "psnr": psnr, "mse": mse, "J": rd_cost(bpp, mse, lam),
              "J_per_image": per_image_costs(evaluation, lam)}
    if "mean_file" in evaluation:
        result["file_bpp"] = evaluation["mean_file"]["bpp"]
    return result


def training_result(rows, target_steps, final_windows=FINAL_LOSS_WINDOWS):
    """Steps done, final loss and images/s from metrics.jsonl rows.

    The final loss is the mean of the last `final_windows` training windows;
    images/s the mean over the windows after the first (which includes the
    start-up)."""
    train = [row for row in rows if row.get("kind") == "train"]
    if not train:
        raise ValueError("metrics.jsonl has no training rows")
    last = train[-final_windows:]
    steady = train[1:] or train
    steps = train[-1]["step"]
    return {
        "steps": steps,
        "stopped_by": "steps" if steps >= target_steps else "time limit or interruption",
        "final_loss": sum(row["loss"] for row in last) / len(last),
        "final_loss_windows": len(last),
        "images_per_second": sum(row["images_per_second"] for row in steady) / len(steady),
        "elapsed_seconds": train[-1].get("elapsed_seconds"),
    }


def per_image_costs(evaluation, lam):
    """{image: J} of one eval.json."""
    return {row["image"]: rd_cost(row["bpp"], mse_from_psnr(row["psnr"]), lam) for row in evaluation["images"]}


def per_image_differences(base, other):
    """J(other) - J(base) image by image over the images both scored: how
    many are lower (better) in `other`, and the differences' mean and sample
    standard deviation."""
    common = sorted(set(base) & set(other))
    if not common:
        raise ValueError("the two evaluations share no image")
    differences = [other[name] - base[name] for name in common]
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1)) if n > 1 else 0.0
    return {"images": n, "lower": sum(d < 0 for d in differences), "mean": mean, "sd": sd}


def deltas(base, other):
    """`other` against `base`: J, bpp in percent, PSNR in dB."""
    return {
        "J": other["J"] - base["J"],
        "J_percent": 100.0 * (other["J"] / base["J"] - 1.0),
        "bpp_percent": 100.0 * (other["bpp"] / base["bpp"] - 1.0),
        "psnr_db": other["psnr"] - base["psnr"],
    }


def compare(tf32, bf16, tf32_seed2):
    """The verdict from three Kodak results (dicts with J, bpp, psnr)."""
    precision = deltas(tf32, bf16)
    seeds = deltas(tf32, tf32_seed2)
    spread = abs(seeds["J"])
    difference = precision["J"]
    within = abs(difference) <= spread
    if within:
        outcome = "no measurable cost: the BF16 difference is within the seed-to-seed spread"
    elif difference > 0:
        outcome = "measurable cost: BF16 is worse by more than the seed-to-seed spread"
    else:
        outcome = "measurable difference in BF16's favour: better by more than the seed-to-seed spread"
    return {
        "rule": RULE,
        "bf16_minus_tf32": precision,
        "tf32_seed2_minus_seed1": seeds,
        "seed_spread_J": spread,
        "no_measurable_cost": within,
        "outcome": outcome,
    }


def verdict_line(comparison, equal_steps=True):
    d = comparison["bf16_minus_tf32"]
    s = comparison["tf32_seed2_minus_seed1"]
    line = (f"verdict: BF16 - TF32 (seed 1) J {d['J']:+.4f} ({d['J_percent']:+.2f}%, bpp {d['bpp_percent']:+.2f}%, "
            f"PSNR {d['psnr_db']:+.3f} dB); TF32 seed 2 - seed 1 J {s['J']:+.4f} ({s['J_percent']:+.2f}%, "
            f"bpp {s['bpp_percent']:+.2f}%, PSNR {s['psnr_db']:+.3f} dB); {comparison['outcome']}")
    if not equal_steps:
        line += " (NOT at equal steps: a run stopped on its time limit)"
    return line


def per_image_line(per_image):
    b, s = per_image["bf16_minus_tf32"], per_image["tf32_seed2_minus_seed1"]
    return (f"per image: BF16 lower J than TF32 (seed 1) on {b['lower']} of {b['images']} images "
            f"(differences: mean {b['mean']:+.4f}, sd {b['sd']:.4f}); TF32 seed 2 lower than seed 1 on "
            f"{s['lower']} of {s['images']} (mean {s['mean']:+.4f}, sd {s['sd']:.4f})")


def markdown_table(runs, lam):
    """runs: dicts with run, precision, seed, training and kodak."""
    lines = [
        f"| run | precision | seed | steps | stopped by | training s | img/s (shared GPU) | final train loss | "
        f"Kodak bpp | Kodak PSNR dB | J = bpp + {lam:g} * 255^2 * MSE |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        training, kodak = run["training"], run["kodak"]
        lines.append(
            f"| {run['run']} | {run['precision']} | {run['seed']} | {training['steps']} | {training['stopped_by']} | "
            f"{training['elapsed_seconds'] or 0:.0f} | "
            f"{training['images_per_second']:.0f} | {training['final_loss']:.4f} | {kodak['bpp']:.4f} | "
            f"{kodak['psnr']:.3f} | {kodak['J']:.4f} |")
    return "\n".join(lines) + "\n"


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"precision_quality: no file {path} (did that run finish?)")
    except json.JSONDecodeError as e:
        raise SystemExit(f"precision_quality: {path} is not JSON: {e}")


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise SystemExit(f"precision_quality: {path}:{number} is not a JSON line: {e}")
    except FileNotFoundError:
        raise SystemExit(f"precision_quality: no file {path} (did that run start?)")
    return rows


def summarise_run(folder, lam, target_steps):
    try:
        training = training_result(read_jsonl(os.path.join(folder, "metrics.jsonl")), target_steps)
        kodak = kodak_result(read_json(os.path.join(folder, "kodak", "eval.json")), lam)
    except ValueError as e:
        raise SystemExit(f"precision_quality: {folder}: {e}")
    return training, kodak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lambda", dest="lam", type=float, required=True, help="the runs' --lambda")
    parser.add_argument("--steps", type=int, required=True, help="the runs' --steps")
    parser.add_argument("--tf32", required=True, help="run folder: TF32, seed 1")
    parser.add_argument("--bf16", required=True, help="run folder: BF16, seed 1")
    parser.add_argument("--tf32-seed2", required=True, help="run folder: TF32, seed 2")
    parser.add_argument("--out", required=True, help="folder for summary.json and table.md")
    args = parser.parse_args(argv)
    if not (args.lam > 0 and math.isfinite(args.lam)):
        parser.error(f"--lambda must be > 0, got {args.lam}")

    runs = []
    for label, precision, seed, folder in [("tf32-seed1", "tf32", 1, args.tf32), ("bf16-seed1", "bf16", 1, args.bf16),
                                           ("tf32-seed2", "tf32", 2, args.tf32_seed2)]:
        training, kodak = summarise_run(folder, args.lam, args.steps)
        runs.append({"run": label, "precision": precision, "seed": seed, "folder": folder, "training": training,
                     "kodak": kodak})
    comparison = compare(*(run["kodak"] for run in runs))
    tf32, bf16, tf32_seed2 = (run["kodak"]["J_per_image"] for run in runs)
    comparison["per_image"] = {"bf16_minus_tf32": per_image_differences(tf32, bf16),
                               "tf32_seed2_minus_seed1": per_image_differences(tf32, tf32_seed2)}
    equal_steps = all(run["training"]["stopped_by"] == "steps" for run in runs) and len(
        {run["training"]["steps"] for run in runs}) == 1
    verdict = verdict_line(comparison, equal_steps)
    table = markdown_table(runs, args.lam)
    per_image = per_image_line(comparison["per_image"])

    os.makedirs(args.out, exist_ok=True)
    summary = {
        "lambda": args.lam,
        "target_steps": args.steps,
        "equal_steps": equal_steps,
        "runs": runs,
        "comparison": comparison,
        "verdict": verdict,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\nRule: " + RULE + ".\n\n" + per_image + "\n\n" + verdict + "\n")
    print(table)
    print("rule: " + RULE)
    print(per_image)
    print(verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Plots plexus-ae results to PNG.

Training curves from a run's metrics.jsonl: loss, PSNR and bpp against step,
the logged training values (each the mean since the previous line) faint, an
exponential moving average over them solid, and the validation rows
({"kind": "val"}, full images, rounded latent) as points:

  python3 tools/plot_metrics.py runs/demo/metrics.jsonl            # -> runs/demo/training-curves.png
  python3 tools/plot_metrics.py runs/demo/metrics.jsonl --out curves.png --title "bls2017, lambda 0.01"

Rate-distortion curves: mean bpp against mean PSNR from eval.json files
written by `plexus-ae eval --out DIR` (one point each, e.g. one per lambda),
and from tools/jpeg_baseline.py output (one curve over JPEG qualities):

  python3 tools/jpeg_baseline.py path/to/kodak > jpeg.json
  python3 tools/plot_metrics.py --rd runs/*/recon/eval.json jpeg.json --out rd.png
"""
import argparse
import json
import os
import pathlib
import sys


def read_rows(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot_metrics: {path}:{number} is not a JSON line: {e}")
    return rows


def pyplot():
    """matplotlib.pyplot with the file-only Agg backend, or an exit that says
    how to install matplotlib for the Python running this script (a user's
    python3, e.g. from pyenv or a virtual environment, may not see the
    system's packages)."""
    try:
        import matplotlib
    except ImportError:
        python = sys.executable or "python3"
        system = "/usr/bin/python3"
        is_system = os.path.realpath(python) == os.path.realpath(system)
        sys.exit(f"plot_metrics: matplotlib is not installed for this Python ({python}).\n"
                 f"Install it for this Python:  {python} -m pip install matplotlib\n"
                 "or, on Debian/Ubuntu, install the system package"
                 + (":\n" if is_system else " and run the script with the system Python:\n")
                 + "  sudo apt-get install python3-matplotlib"
                 + ("" if is_system else f"\n  {system} tools/plot_metrics.py ..."))
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def moving_average(values, span):
    """Exponential moving average with bias correction: no lag from a
    warm-up window, and the first point is the first value."""
    alpha = 2.0 / (span + 1.0)
    average, weight, out = 0.0, 0.0, []
    for v in values:
        average = (1 - alpha) * average + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(average / weight)
    return out


def plot_training(metrics, out, title):
    plt = pyplot()

    rows = read_rows(metrics)
    train = [r for r in rows if r.get("kind") == "train"]
    val = [r for r in rows if r.get("kind") == "val"]
    if not train and not val:
        sys.exit(f"plot_metrics: {metrics} has no training or validation rows")
    # A span of a tenth of the run, so a short run is not flattened.
    span = max(1, min(20, len(train) // 10))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = [("loss", "loss = lambda*255^2*MSE + bpp"), ("psnr", "PSNR (dB)"), ("bpp", "bits per pixel")]
    for ax, (key, label) in zip(axes, panels):
        if train:
            steps = [r["step"] for r in train]
            values = [r[key] for r in train]
            ax.plot(steps, values, alpha=0.3, color="tab:blue")
            ax.plot(steps, moving_average(values, span), color="tab:blue",
                    label=f"training (moving average, span {span})")
        points = [r for r in val if key in r]
        if points:
            ax.plot([r["step"] for r in points], [r[key] for r in points], "o-", color="tab:orange",
                    label="validation")
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if key == "loss" and all(r[key] > 0 for r in train + points):
            ax.set_yscale("log")
    axes[0].legend()
    fig.suptitle(title or str(metrics))
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def plot_rate_distortion(files, out, title):
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 5))
    for path in files:
        data = json.loads(pathlib.Path(path).read_text())
        if "rows" in data:  # tools/jpeg_baseline.py
            rows = sorted(data["rows"], key=lambda r: r["mean_bpp"])
            ax.plot([r["mean_bpp"] for r in rows], [r["mean_psnr"] for r in rows], "-", color="gray",
                    label=f"JPEG ({data.get('folder', path)})")
        elif "mean_bpp" in data:  # plexus-ae eval --out
            ax.plot([data["mean_bpp"]], [data["mean_psnr"]], "o", label=str(pathlib.Path(path).parent))
        else:
            sys.exit(f"plot_metrics: {path} is neither a plexus-ae eval.json nor tools/jpeg_baseline.py output")
    ax.set_xlabel("bits per pixel")
    ax.set_ylabel("PSNR (dB)")
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title or "rate-distortion")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="a metrics.jsonl, or with --rd eval.json / jpeg_baseline files")
    parser.add_argument("--rd", action="store_true", help="plot rate-distortion points and curves")
    parser.add_argument("--out", help="PNG to write (default: training-curves.png or rd.png beside the first file)")
    parser.add_argument("--title")
    args = parser.parse_args()
    for path in args.files:
        if not pathlib.Path(path).is_file():
            sys.exit(f"plot_metrics: no file '{path}'")
    first = pathlib.Path(args.files[0])
    if args.rd:
        out = args.out or str(first.parent / "rd.png")
        plot_rate_distortion(args.files, out, args.title)
    else:
        if len(args.files) != 1:
            sys.exit("plot_metrics: training curves take one metrics.jsonl (use --rd for several eval.json files)")
        out = args.out or str(first.parent / "training-curves.png")
        plot_training(first, out, args.title)
    print(f"plot_metrics: wrote {out}")


if __name__ == "__main__":
    main()

"""The rate-distortion plots: PSNR against bpp and MS-SSIM (dB) against bpp,
every standard codec as a line, every published curve dashed (on the PSNR
plot only: they have no MS-SSIM) and every Plexus curve in bold (a one-model
curve as a single large marker)."""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAX_BPP = 1.6


def plot(curves, quality, ylabel, title, path):
    figure, axes = plt.subplots(figsize=(7, 5), dpi=100)
    visible = []  # the qualities inside the plotted rate range, which set the vertical range
    for curve in curves.values():
        if any(p[quality] is None for p in curve["points"]):
            continue
        xs = [p["bpp"] for p in curve["points"]]
        ys = [p[quality] for p in curve["points"]]
        visible += [y for x, y in zip(xs, ys) if x <= MAX_BPP and math.isfinite(y)]
        if curve["kind"] == "published":
            axes.plot(xs, ys, linestyle="--", marker="s", markersize=3, linewidth=1.2, label=curve["label"])
        elif curve["kind"] == "plexus":
            axes.plot(xs, ys, marker="*", markersize=14 if len(xs) == 1 else 9, linewidth=2.5, label=curve["label"])
        else:
            axes.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.2, label=curve["label"])
    axes.set_xlabel("bits per pixel (file size)")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.set_xlim(0, MAX_BPP)
    if visible:
        axes.set_ylim(min(visible) - 1, max(visible) + 1)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)

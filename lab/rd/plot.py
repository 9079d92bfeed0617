"""The rate-distortion plots: PSNR against bpp and MS-SSIM (dB) against bpp,
every standard codec as a line and every Plexus curve in bold (a one-model
curve as a single large marker)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(curves, quality, ylabel, title, path):
    figure, axes = plt.subplots(figsize=(7, 5), dpi=100)
    for curve in curves.values():
        xs = [p["bpp"] for p in curve["points"]]
        ys = [p[quality] for p in curve["points"]]
        if curve["kind"] == "plexus":
            axes.plot(xs, ys, marker="*", markersize=14 if len(xs) == 1 else 9, linewidth=2.5, label=curve["label"])
        else:
            axes.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.2, label=curve["label"])
    axes.set_xlabel("bits per pixel (file size)")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.set_xlim(0, 1.6)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)

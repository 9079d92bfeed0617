"""From per-image measurements to curves, BD-rates, a CSV, a JSON and
Markdown tables, and the plots.

A measurement is a dict with codec, label, setting, image, bytes, pixels,
bpp, psnr, ms_ssim. A curve is one codec (or one named Plexus family): one
point per setting, the mean over images of bpp, of PSNR (dB) and of MS-SSIM.
"""
import csv
import json
import math
from collections import OrderedDict

import numpy as np

from bjontegaard import bd_rate, rate_difference_at_quality

FIELDS = ["codec", "label", "setting", "image", "bytes", "pixels", "bpp", "psnr", "ms_ssim"]


def ms_ssim_db(value):
    """-10 log10(1 - MS-SSIM), the usual way to plot MS-SSIM near 1."""
    return math.inf if value >= 1.0 else -10.0 * math.log10(1.0 - value)


def curves_from(measurements, kinds):
    """OrderedDict codec -> {label, kind, points: [{setting, bpp, psnr, ms_ssim, ms_ssim_db, images}]},
    points sorted by rate. kinds: codec -> "standard" or "plexus"."""
    grouped = OrderedDict()
    for m in measurements:
        curve = grouped.setdefault(m["codec"], {"label": m["label"], "kind": kinds[m["codec"]], "settings": OrderedDict()})
        curve["settings"].setdefault(str(m["setting"]), []).append(m)
    curves = OrderedDict()
    for codec, curve in grouped.items():
        points = []
        for setting, rows in curve["settings"].items():
            ms = float(np.mean([r["ms_ssim"] for r in rows]))
            points.append({"setting": setting, "images": len(rows),
                           "bpp": float(np.mean([r["bpp"] for r in rows])),
                           "psnr": float(np.mean([r["psnr"] for r in rows])),
                           "ms_ssim": ms, "ms_ssim_db": ms_ssim_db(ms)})
        points.sort(key=lambda p: p["bpp"])
        curves[codec] = {"label": curve["label"], "kind": curve["kind"], "points": points}
    return curves


def _versus(anchor_points, test_points, quality, fit):
    """BD-rate (a fraction) of test against anchor on one quality measure, or
    for a one-point test curve the rate difference at equal quality; None
    (with the reason) when the curves do not overlap."""
    anchor = [(p["bpp"], p[quality]) for p in anchor_points]
    test = [(p["bpp"], p[quality]) for p in test_points]
    try:
        if len(test) > 1:
            return bd_rate(anchor, test, fit), "BD-rate"
        value = rate_difference_at_quality(anchor, test[0])
        return (value, "at one point") if value is not None else (None, "outside the codec's range")
    except ValueError as error:
        return None, str(error)


def bd_rates(curves, fit):
    """[{plexus, codec, psnr, psnr_kind, ms_ssim, ms_ssim_kind}] for every Plexus curve against every
    standard codec and every published curve (those on PSNR only: they have no MS-SSIM)."""
    rows = []
    for name, test in curves.items():
        if test["kind"] != "plexus":
            continue
        for codec, anchor in curves.items():
            if anchor["kind"] not in ("standard", "published"):
                continue
            psnr, psnr_kind = _versus(anchor["points"], test["points"], "psnr", fit)
            if anchor["kind"] == "published":
                ssim, ssim_kind = None, "no published MS-SSIM"
            else:
                ssim, ssim_kind = _versus(anchor["points"], test["points"], "ms_ssim_db", fit)
            rows.append({"plexus": name, "plexus_label": test["label"], "codec": codec, "codec_label": anchor["label"],
                         "psnr": psnr, "psnr_kind": psnr_kind, "ms_ssim": ssim, "ms_ssim_kind": ssim_kind})
    return rows


def write_csv(path, measurements):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for m in measurements:
            writer.writerow({k: m[k] for k in FIELDS})


def write_json(path, description, curves, comparisons):
    with open(path, "w") as f:
        json.dump({"description": description, "curves": curves, "bd_rates": comparisons}, f, indent=1)


def _percent(value):
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def markdown(curves, comparisons, image_count, fit):
    """Two Markdown tables: every point of every curve, and the BD-rates."""
    lines = [f"Mean over {image_count} images at each setting; bpp from file sizes; PSNR on 8-bit RGB; "
             "MS-SSIM on RGB (mean of the three channels)."
             + (" Published curves: their source's numbers (PSNR only), not measured here."
                if any(c["kind"] == "published" for c in curves.values()) else ""), "",
             "| codec | setting | bpp | PSNR (dB) | MS-SSIM | MS-SSIM (dB) |",
             "|---|---|---:|---:|---:|---:|"]
    for curve in curves.values():
        for p in curve["points"]:
            ms_ssim = "n/a | n/a" if p["ms_ssim"] is None else f"{p['ms_ssim']:.4f} | {p['ms_ssim_db']:.2f}"
            lines.append(f"| {curve['label']} | {p['setting']} | {p['bpp']:.3f} | {p['psnr']:.2f} | {ms_ssim} |")
    if comparisons:
        lines += ["", f"Rate of each Plexus curve against each codec and published curve at equal quality "
                  "(negative: Plexus needs fewer bits; published curves have PSNR only). "
                  f"BD-rate ({fit} fit in log-rate over the shared quality range); for a one-model curve, "
                  "its rate over the codec's rate interpolated at the same quality.", "",
                  "| Plexus | against | rate at equal PSNR | rate at equal MS-SSIM |", "|---|---|---:|---:|"]
        for row in comparisons:
            single = row["psnr_kind"] == "at one point"
            note = " (one point)" if single else ""
            ms_note = note if row["ms_ssim"] is not None else ""
            lines.append(f"| {row['plexus_label']} | {row['codec_label']} | {_percent(row['psnr'])}{note} | "
                         f"{_percent(row['ms_ssim'])}{ms_note} |")
    return "\n".join(lines) + "\n"


# The plots' rate range (bpp); their vertical range is that of the points inside it.
MAX_BPP = 1.6


def plot_rd(curves, title, folder):
    """rd-psnr.png (PSNR against bpp) and rd-ms-ssim.png (MS-SSIM in dB against bpp) in `folder`:
    every standard codec as a line, every published curve dashed (on the PSNR plot only: they have
    no MS-SSIM) and every Plexus curve in bold (a one-model curve as a single large marker).
    matplotlib is imported here, so that the rest of the module needs only numpy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for quality, ylabel, name in (("psnr", "PSNR (dB, RGB)", "rd-psnr.png"),
                                  ("ms_ssim_db", "MS-SSIM (dB, RGB): -10 log10(1 - MS-SSIM)", "rd-ms-ssim.png")):
        _plot(plt, curves, quality, ylabel, title, folder / name)

def _plot(plt, curves, quality, ylabel, title, path):
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

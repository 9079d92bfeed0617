#!/usr/bin/env python3
"""JPEG baseline: compresses every image of a folder with
libjpeg-turbo's cjpeg (Debian: libjpeg-turbo-progs; it reads PPM, not PNG) at
each quality 1..100, decodes with djpeg, and reports mean bits per pixel
(file bytes * 8 / pixels) and mean PSNR (RGB, peak 255) per quality, as JSON.
With --bpp B it also prints the quality whose mean bpp is nearest B.

  python3 tools/jpeg_baseline.py path/to/kodak --bpp 0.5992 > jpeg.json

where path/to/kodak holds the 24 Kodak PhotoCD images (r0k.us/graphics/kodak).
"""
import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--bpp", type=float, help="report the quality whose mean bpp is nearest this")
    ap.add_argument("--qualities", default="1-100", help="range, e.g. 5-95")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.qualities.split("-"))
    images = sorted(p for p in pathlib.Path(args.folder).iterdir() if p.suffix.lower() in (".png", ".jpg", ".ppm"))
    if not images:
        sys.exit(f"jpeg_baseline: no images in {args.folder}")
    version = subprocess.run(["cjpeg", "-version"], capture_output=True, text=True).stderr.strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        originals = []
        for p in images:
            rgb = np.asarray(Image.open(p).convert("RGB"))
            ppm = tmp / (p.stem + ".ppm")
            Image.fromarray(rgb).save(ppm)
            originals.append((p.name, rgb, ppm))
        for q in range(lo, hi + 1):
            per_image = []
            for name, rgb, ppm in originals:
                jpg, back = tmp / "x.jpg", tmp / "x.ppm"
                subprocess.run(["cjpeg", "-quality", str(q), "-optimize", "-outfile", str(jpg), str(ppm)], check=True)
                subprocess.run(["djpeg", "-ppm", "-outfile", str(back), str(jpg)], check=True)
                decoded = np.asarray(Image.open(back).convert("RGB"))
                bpp = jpg.stat().st_size * 8.0 / (rgb.shape[0] * rgb.shape[1])
                per_image.append({"image": name, "bpp": bpp, "psnr": psnr(rgb, decoded)})
            rows.append({"quality": q, "mean_bpp": float(np.mean([r["bpp"] for r in per_image])),
                         "mean_psnr": float(np.mean([r["psnr"] for r in per_image])), "images": per_image})
    result = {"encoder": version, "options": "-optimize", "folder": pathlib.Path(args.folder).name,  # its name, not a local path
               "count": len(images), "rows": rows}
    if args.bpp is not None:
        best = min(rows, key=lambda r: abs(r["mean_bpp"] - args.bpp))
        result["nearest"] = {"target_bpp": args.bpp, "quality": best["quality"], "mean_bpp": best["mean_bpp"],
                             "mean_psnr": best["mean_psnr"]}
        print(f"nearest to {args.bpp} bpp: quality {best['quality']}: {best['mean_bpp']:.4f} bpp, "
              f"{best['mean_psnr']:.2f} dB", file=sys.stderr)
    json.dump(result, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

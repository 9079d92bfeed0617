#!/usr/bin/env python3
"""Real-file numbers and the cross-device check of mean-scale-equal-time.sh.

usage: compare_decodes.py ORIGINALS FILES DECODED_A DECODED_B

For every original image NAME.png: the bits per pixel of FILES/NAME.pxae,
the PSNR of DECODED_A/NAME.png (and of DECODED_B/NAME.png) against it, and
the largest pixel difference between the two decodes of the same file.
Prints a row per image and a mean row; exits 1 when a file or decode is
missing or the decodes differ by more than one level."""
import math
import pathlib
import sys

import numpy as np
from PIL import Image


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    originals, files, decoded_a, decoded_b = (pathlib.Path(p) for p in sys.argv[1:])
    rows = []
    for original in sorted(originals.glob("*.png")):
        name = original.stem
        reference = np.asarray(Image.open(original).convert("RGB"))
        compressed = files / f"{name}.pxae"
        a_path, b_path = decoded_a / f"{name}.png", decoded_b / f"{name}.png"
        for path in (compressed, a_path, b_path):
            if not path.exists():
                sys.exit(f"missing {path}")
        a = np.asarray(Image.open(a_path).convert("RGB"))
        b = np.asarray(Image.open(b_path).convert("RGB"))
        bpp = 8 * compressed.stat().st_size / (reference.shape[0] * reference.shape[1])
        diff = int(np.max(np.abs(a.astype(np.int16) - b.astype(np.int16))))
        rows.append((name, bpp, psnr(reference, a), psnr(reference, b), diff))
    print(f"{'image':12} {'file bpp':>9} {'PSNR A dB':>10} {'PSNR B dB':>10} {'max |A-B|':>10}")
    for name, bpp, pa, pb, diff in rows:
        print(f"{name:12} {bpp:9.4f} {pa:10.3f} {pb:10.3f} {diff:10d}")
    n = len(rows)
    worst = max(r[4] for r in rows)
    print(f"{'mean n=' + str(n):12} {sum(r[1] for r in rows) / n:9.4f} {sum(r[2] for r in rows) / n:10.3f} "
          f"{sum(r[3] for r in rows) / n:10.3f} {worst:10d}")
    sys.exit(0 if worst <= 1 else 1)


if __name__ == "__main__":
    main()

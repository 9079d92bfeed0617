"""Published rate-distortion curves read from a TSV file, drawn and compared
against (PSNR only) next to the codecs measured here.

The file: lines starting with '#' are comments (the source of the numbers
belongs there), blank lines are skipped, the first other line is the header
"codec<TAB>bpp<TAB>psnr_rgb_db", and every further line is one point of one
curve: the curve's name, its mean bpp and its mean PSNR on RGB (dB). A curve
is every row of one name, in any order.
"""
import math
from collections import OrderedDict

HEADER = ["codec", "bpp", "psnr_rgb_db"]
DEFAULT_CODECS = ["compressai bmshj2018-hyperprior", "compressai mbt2018-mean", "av1", "vtm"]


def _number(text, what, where, positive=False):
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {what} '{text}' is not a number") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{where}: {what} '{text}' must be {'positive and ' if positive else ''}finite")
    return value


def read_published(path):
    """OrderedDict curve name -> [(bpp, psnr)] in the file's order. A malformed
    file raises ValueError naming the file and the line."""
    curves = OrderedDict()
    header_seen = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}, line {number}"
            fields = line.split("\t")
            if not header_seen:
                if [field.strip() for field in fields] != HEADER:
                    raise ValueError(f"{where}: expected the header '{chr(9).join(HEADER)}' (tab-separated), "
                                     f"got '{line}'")
                header_seen = True
                continue
            if len(fields) != len(HEADER):
                raise ValueError(f"{where}: expected {len(HEADER)} tab-separated fields "
                                 f"({', '.join(HEADER)}), got {len(fields)}: '{line}'")
            name = fields[0].strip()
            if not name:
                raise ValueError(f"{where}: the codec name is empty")
            point = (_number(fields[1].strip(), "bpp", where, positive=True),
                     _number(fields[2].strip(), "PSNR", where))
            curves.setdefault(name, []).append(point)
    if not header_seen:
        raise ValueError(f"{path}: no header line '{chr(9).join(HEADER)}' and no points")
    return curves


def select(curves, names, path):
    """The curves named, in the order named; an unknown name raises ValueError listing the file's."""
    missing = [n for n in names if n not in curves]
    if missing:
        raise ValueError(f"{path} has no curve {', '.join(repr(n) for n in missing)} "
                         f"(it has: {', '.join(curves)})")
    return OrderedDict((n, curves[n]) for n in names)


def curve_key(name):
    """The curve's key among the measured ones (a published 'jpeg' is not the measured 'jpeg')."""
    return "published-" + name


def as_report_curves(curves):
    """OrderedDict key -> a report curve of kind "published": points sorted by
    rate with bpp and psnr, and no MS-SSIM (None)."""
    result = OrderedDict()
    for name, points in curves.items():
        result[curve_key(name)] = {
            "label": f"{name} (published)", "kind": "published",
            "points": [{"setting": str(i + 1), "images": None, "bpp": bpp, "psnr": quality,
                        "ms_ssim": None, "ms_ssim_db": None}
                       for i, (bpp, quality) in enumerate(sorted(points))]}
    return result

"""The compact result files of a rate-distortion comparison: one small JSON per
codec or Plexus curve (as CompressAI's results/image/kodak/*.json), in the
repository's result schema:

  {"claim": ..., "device": ..., "commit": ..., "command": ..., "date": "YYYY-MM-DD",
   "codec": "webp", "label": "WebP (libwebp)", "kind": "standard" | "plexus", "images": 24,
   "results": [{"setting": "50", "bpp": 0.71, "psnr": 32.9, "ms_ssim": 0.975}, ...]}

plus, where known, the codec's version and options, or the Plexus models'
hashes and the BD-rates compare.py found. `compare.py` writes them into
OUT/results/; `plot_results.py` reads them back into curves for the plots and
the BD-rate table.
"""
import json
import math
import pathlib
from collections import OrderedDict

from report import ms_ssim_db

RECORD_KEYS = ["claim", "device", "commit", "command", "date"]
POINT_KEYS = ["setting", "bpp", "psnr", "ms_ssim"]
KINDS = ("standard", "plexus")


def file_name(codec):
    """The file of a curve: its key without the 'plexus-' prefix ('plexus-bls2017' -> 'bls2017.json')."""
    return (codec[len("plexus-"):] if codec.startswith("plexus-") else codec).replace(" ", "-") + ".json"


def to_record(codec, curve, record, extra=None):
    """One curve of report.curves_from as a result file's dict; record holds RECORD_KEYS."""
    missing = [k for k in RECORD_KEYS if not record.get(k)]
    if missing:
        raise ValueError(f"result file of '{codec}': no {', '.join(missing)}")
    data = {k: record[k] for k in RECORD_KEYS}
    data.update({"codec": codec, "label": curve["label"], "kind": curve["kind"]})
    data.update(extra or {})
    data["results"] = [{k: p[k] for k in POINT_KEYS} for p in curve["points"]]
    return data


def write_curves(folder, curves, record, extras=None):
    """Every standard and Plexus curve of curves into folder/<name>.json; the paths written."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for codec, curve in curves.items():
        if curve["kind"] not in KINDS:
            continue
        path = folder / file_name(codec)
        path.write_text(json.dumps(to_record(codec, curve, record, (extras or {}).get(codec)), indent=1) + "\n")
        written.append(path)
    return written


def _number(value, what, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {what} {value!r} is not a finite number")
    return float(value)


def read_curve(path):
    """(codec, curve) from one result file, the curve as report.curves_from makes it (points sorted by
    rate, ms_ssim_db added). A malformed file raises ValueError naming the file and what is wrong."""
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a result file (a JSON object)")
    missing = [k for k in RECORD_KEYS + ["codec", "label", "kind", "results"] if k not in data]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    if data["kind"] not in KINDS:
        raise ValueError(f"{path}: kind '{data['kind']}' is none of {', '.join(KINDS)}")
    if not isinstance(data["results"], list) or not data["results"]:
        raise ValueError(f"{path}: results holds no points")
    points = []
    for index, row in enumerate(data["results"]):
        where = f"{path}, results[{index}]"
        if not isinstance(row, dict) or any(k not in row for k in POINT_KEYS):
            raise ValueError(f"{where}: a point needs {', '.join(POINT_KEYS)}")
        bpp = _number(row["bpp"], "bpp", where)
        if bpp <= 0:
            raise ValueError(f"{where}: bpp {bpp} must be positive")
        ms_ssim = _number(row["ms_ssim"], "ms_ssim", where)
        points.append({"setting": str(row["setting"]), "images": data.get("images"), "bpp": bpp,
                       "psnr": _number(row["psnr"], "psnr", where), "ms_ssim": ms_ssim,
                       "ms_ssim_db": ms_ssim_db(ms_ssim)})
    points.sort(key=lambda p: p["bpp"])
    return data["codec"], {"label": data["label"], "kind": data["kind"], "points": points}


def read_curves(paths):
    """OrderedDict codec -> curve of every file, standard codecs first, in the order given; a codec in two
    files raises ValueError naming both."""
    standard, plexus, seen = OrderedDict(), OrderedDict(), {}
    for path in paths:
        codec, curve = read_curve(path)
        if codec in seen:
            raise ValueError(f"{path}: codec '{codec}' is in {seen[codec]} too")
        seen[codec] = path
        (standard if curve["kind"] == "standard" else plexus)[codec] = curve
    standard.update(plexus)
    return standard

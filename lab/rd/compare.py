#!/usr/bin/env python3
"""Rate-distortion comparison of Plexus models against JPEG, WebP, JPEG 2000
and AVIF on a folder of PNG images, from real files.

Every image is encoded with every standard codec at settings spanning about
0.1 to 1.5 bpp (lab/rd/standard_codecs.py) and with every Plexus model given
(the Python package `plexus.codec` when it is importable, else `plexus-ae
compress` then `plexus-ae decompress`; --plexus-runner picks); bpp is 8 x file bytes
over pixels, PSNR and MS-SSIM are measured on the decoded 8-bit RGB image
(lab/rd/quality.py). Per codec and setting the means over images make a
curve; every Plexus curve gets a BD-rate against every codec
(lab/rd/bjontegaard.py).

  python3 lab/rd/compare.py path/to/kodak --out rd \\
      --plexus bls2017=models/trained/bls2017/model.safetensors

Models with the same NAME form one curve (one point per model):
  --plexus hyperprior=q1.safetensors --plexus hyperprior=q2.safetensors ...
or --plexus-list FILE with one "NAME=MODEL_FILE" per line. A variable-rate
model gives one curve with one point per level:
  --plexus-levels gain=runs/gain/model.safetensors:0,1,2.5,4
and the shipped models one curve with one point per quality:
  --plexus-quality shipped=1,2,3,4,5,6

Published curves (PSNR only) join the PSNR plot and the BD-rate table with
--published lab/rd/kodak-768-published-rd.tsv (for the 24 Kodak images at
768x512; --published-codecs picks its curves).

Writes into --out: points.csv (every image at every setting), curves.json
(the mean curves and the BD-rates), table.md (the Markdown tables, also
printed), rd-psnr.png, rd-ms-ssim.png, results/ (one compact result file per
curve, result_files.py: what lab/results/codec/ holds and plot_results.py
reads), files/ (the compressed files) and cache.json. A result is reused while its image, codec setting and encoder
version (for Plexus: the model file and the package or plexus-ae binary) are unchanged,
so adding a model to a finished comparison runs only that model;
--codecs none leaves the standard codecs out of the run but keeps their
cached results in the tables.
"""
import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
    from PIL import Image
except ImportError as missing:
    sys.exit(f"compare: {missing}; tools/install-deps.sh --codecs installs python3-numpy, python3-pil, python3-matplotlib "
             "(run this script with that Python, e.g. /usr/bin/python3)")

import standard_codecs  # noqa: E402
import plexus_points  # noqa: E402
import published  # noqa: E402
import result_files  # noqa: E402
import report  # noqa: E402
from quality import ms_ssim, psnr  # noqa: E402

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_rgb(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def measure(original_png, compressed, decoded, codec, label, setting):
    """The measurement of one decoded file against its original."""
    original, restored = load_rgb(original_png), load_rgb(decoded)
    if restored.shape != original.shape:
        raise RuntimeError(f"{decoded}: decoded to {restored.shape[1]}x{restored.shape[0]}, "
                           f"the original is {original.shape[1]}x{original.shape[0]}")
    size = os.path.getsize(compressed)
    pixels = original.shape[0] * original.shape[1]
    return {"codec": codec, "label": label, "setting": setting, "image": pathlib.Path(original_png).name,
            "bytes": size, "pixels": pixels, "bpp": 8.0 * size / pixels,
            "psnr": psnr(original, restored), "ms_ssim": ms_ssim(original, restored)}


def standard_task(codec_name, setting, original, compressed_dir):
    """Encodes, decodes and measures one image at one setting (in a worker process)."""
    codec = standard_codecs.codec_by_name(codec_name)
    source = original.with_suffix("." + codec.input_format)
    compressed = compressed_dir / f"{original.stem}.{codec.extension}"
    with tempfile.TemporaryDirectory() as scratch:
        decoded = pathlib.Path(scratch) / f"decoded.{codec.decoded_format}"
        standard_codecs.run(codec.encode(str(source), str(compressed), setting))
        standard_codecs.run(codec.decode(str(compressed), str(decoded)))
        return measure(original, compressed, decoded, codec.name, codec.label, setting)


class Cache:
    """Results by key, saved after every batch so an interrupted run keeps its work."""

    def __init__(self, path):
        self.path = path
        self.entries = json.loads(path.read_text()) if path.exists() else {}

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, value):
        self.entries[key] = value

    def save(self):
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.entries, indent=0))
        temporary.replace(self.path)


def prepare_originals(folder, work):
    """Each PNG of the folder as 8-bit RGB PNG and PPM (what the encoders read), with its content hash."""
    if not pathlib.Path(folder).is_dir():
        raise SystemExit(f"compare: '{folder}' is not a folder")
    images = sorted(p for p in pathlib.Path(folder).iterdir() if p.suffix.lower() == ".png")
    if not images:
        raise SystemExit(f"compare: no PNG images in '{folder}'")
    originals = work / "originals"
    originals.mkdir(parents=True, exist_ok=True)
    prepared = []
    for path in images:
        rgb = load_rgb(path)
        png = originals / path.name
        Image.fromarray(rgb).save(png)
        Image.fromarray(rgb).save(png.with_suffix(".ppm"))
        prepared.append((png, hashlib.sha256(rgb.tobytes() + str(rgb.shape).encode()).hexdigest()))
    return prepared


def run_standard(codec, originals, work, cache, pool):
    version = standard_codecs.version_text(codec)
    if not version:
        raise SystemExit(f"compare: '{codec.encode('x', 'y', 0)[0]}' is not installed; run tools/install-deps.sh --codecs")
    results = []
    for setting in codec.settings:
        compressed_dir = work / "files" / codec.name / str(setting)
        compressed_dir.mkdir(parents=True, exist_ok=True)
        pending = {}
        for original, digest in originals:
            key = json.dumps([codec.name, codec.options, setting, digest, version])
            hit = cache.get(key)
            if hit is not None:
                results.append(dict(hit, image=original.name))
            else:
                pending[key] = pool.submit(standard_task, codec.name, setting, original, compressed_dir)
        for key, future in pending.items():
            result = future.result()
            cache.put(key, result)
            results.append(result)
        if pending:
            cache.save()
            print(f"  {codec.name} {codec.setting_name} {setting}: {len(pending)} images encoded", file=sys.stderr)
    return results


def cached_standard(codec, originals, cache):
    """The cached results of a codec not run now: these images, its current
    options and settings, and its installed version (any, when not installed)."""
    digests = {d: o.name for o, d in originals}
    version = standard_codecs.version_text(codec)
    found = []
    for key, value in cache.entries.items():
        parts = json.loads(key)
        if (len(parts) == 5 and parts[0] == codec.name and parts[1] == codec.options and parts[2] in codec.settings
                and parts[3] in digests and (not version or parts[4] == version)):
            found.append(dict(value, image=digests[parts[3]]))
    return found


def code_with_package(point, device, originals, compressed_dir, decoded_dir):
    """Compresses and decompresses every image in this process, through plexus.codec."""
    from plexus import codec as plexus_codec
    try:
        model = plexus_codec.Model(path=str(point.model), device=device, level=point.level)
        for original, _ in originals:
            data = model.compress(load_rgb(original))
            (compressed_dir / (original.stem + ".pxae")).write_bytes(data)
            Image.fromarray(model.decompress(data)).save(decoded_dir / (original.stem + ".png"))
    except plexus_codec.Error as error:
        raise SystemExit(f"compare: plexus.codec on '{point.model}' ({point.setting}) failed: {error}") from None


def code_with_cli(point, plexus_ae, device, originals, compressed_dir, decoded_dir):
    """Compresses and decompresses every image with two plexus-ae commands."""
    images = [str(o) for o, _ in originals]
    files = [str(compressed_dir / (o.stem + ".pxae")) for o, _ in originals]
    for argv in ([plexus_ae, "compress", *point.compress_args, "--device", device, *images,
                  "-o", str(compressed_dir) + "/"],
                 [plexus_ae, "decompress", *point.decompress_args, "--device", device, *files,
                  "-o", str(decoded_dir) + "/"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=plexus_points.environment_for(point))
        if done.returncode != 0:
            shown = " ".join(argv[:argv.index("--device")])
            raise SystemExit(f"compare: {shown} ... failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")


def run_plexus(point, runner, binary_digest, device, originals, work, cache, pool):
    """One point: compress every image to a .pxae file, decompress them all, measure. `runner` is
    "package" or the plexus-ae binary."""
    model_digest = sha256_of(point.model)
    codec = f"plexus-{point.curve}"
    label = f"Plexus {point.curve}"
    # Keyed by the model (and level), not the curve's name: a model moved to another curve is not run again.
    keys = [json.dumps(["plexus", *point.identity(model_digest), binary_digest, digest]) for _, digest in originals]
    if all(cache.get(k) is not None for k in keys):
        return [dict(cache.get(k), image=o.name, codec=codec, label=label, setting=point.setting)
                for k, (o, _) in zip(keys, originals)]
    compressed_dir = work / "files" / codec / point.folder_name(model_digest)
    decoded_dir = work / "decoded" / codec / point.folder_name(model_digest)
    for folder in (compressed_dir, decoded_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    started = time.time()
    if runner == "package":
        code_with_package(point, device, originals, compressed_dir, decoded_dir)
    else:
        code_with_cli(point, runner, device, originals, compressed_dir, decoded_dir)
    print(f"  {codec} {point.setting}: compress + decompress of {len(originals)} images in "
          f"{time.time() - started:.0f} s", file=sys.stderr)
    futures = [pool.submit(measure, o, compressed_dir / (o.stem + ".pxae"), decoded_dir / (o.stem + ".png"),
                           codec, label, point.setting) for o, _ in originals]
    results = []
    for key, future in zip(keys, futures):
        result = future.result()
        cache.put(key, result)
        results.append(result)
    cache.save()
    shutil.rmtree(decoded_dir, ignore_errors=True)
    return results


def run_record(args, image_count):
    """The record of this run for its result files: what was measured, where, at which commit, by which command."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"claim": f"mean bpp, RGB PSNR and MS-SSIM of real files at each setting over the {image_count} images "
                     f"of {pathlib.Path(args.images).name}",
            "device": "CPU" if args.device == "cpu" else f"plexus-ae --device {args.device}",
            "commit": commit or "unknown", "command": "python3 lab/rd/compare.py " + shlex.join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


def result_extras(curves, description, comparisons):
    """Per curve: the image count and the codec's version and options, or the Plexus models and BD-rates."""
    extras = {}
    for codec in curves:
        extra = {"images": description["count"]}
        if codec in description["codecs"]:
            extra.update(description["codecs"][codec])
        extra["bd_rates"] = [{"against": r["codec"], "psnr": r["psnr"], "psnr_kind": r["psnr_kind"],
                              "ms_ssim": r["ms_ssim"], "ms_ssim_kind": r["ms_ssim_kind"]}
                             for r in comparisons if r["plexus"] == codec]
        if not extra["bd_rates"]:
            del extra["bd_rates"]
        extras[codec] = extra
    return extras


def read_published_curves(path, names):
    """The --published curves named by --published-codecs, read before any encoding so a bad file fails fast."""
    if not path:
        return {}
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    return published.select(published.read_published(path), chosen, path)


def plexus_runner(args):
    """("package", the extension module's file) or (the plexus-ae binary, the same): how Plexus points
    are coded, and the file whose digest keys their cached results."""
    if args.plexus_runner != "cli":
        try:
            from plexus import codec as plexus_codec
            return "package", plexus_codec.__file__
        except ImportError as missing:
            if args.plexus_runner == "package":
                raise SystemExit(f"compare: --plexus-runner package: {missing} (pip install . from the "
                                 "repository, or put the build's python/ folder on PYTHONPATH)") from None
    if not os.access(args.plexus_ae, os.X_OK):
        raise SystemExit(f"compare: plexus-ae not found at '{args.plexus_ae}' (build it, or pass --plexus-ae)")
    return args.plexus_ae, args.plexus_ae


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images", help="folder of PNG images (e.g. the 24 Kodak images)")
    ap.add_argument("--out", default="rd", help="output and cache folder (default: rd)")
    ap.add_argument("--plexus", action="append", metavar="NAME=MODEL_FILE", help="a Plexus model (repeatable)")
    ap.add_argument("--plexus-list", metavar="FILE", help="a file of NAME=MODEL_FILE lines")
    ap.add_argument("--plexus-levels", action="append", metavar="NAME=MODEL_FILE:L1,L2,...",
                    help="a variable-rate Plexus model: one point of curve NAME per level (compress --level L; "
                         "repeatable)")
    ap.add_argument("--plexus-quality", action="append", metavar="NAME=Q1,Q2,...",
                    help="the shipped Plexus models: one point of curve NAME per quality (compress --quality Q; "
                         "repeatable)")
    ap.add_argument("--quality-catalog", default=plexus_points.default_quality_catalog(REPOSITORY), metavar="FILE",
                    help="the quality catalog of --plexus-quality, given to plexus-ae too (default: "
                         "$PLEXUS_AE_QUALITY_CATALOG, else models/trained/quality-catalog.json)")
    ap.add_argument("--plexus-ae", default=str(REPOSITORY / "build" / "bin" / "plexus-ae"), help="the plexus-ae binary")
    ap.add_argument("--device", default="auto", help="the device Plexus codes on (cpu, cuda, auto)")
    ap.add_argument("--plexus-runner", choices=["auto", "package", "cli"], default="auto",
                    help="code through the Python package plexus.codec (in this process) or plexus-ae "
                         "(subprocesses); auto: the package when it is importable")
    ap.add_argument("--codecs", default="jpeg,webp,jpeg2000,avif",
                    help="standard codecs to run, comma-separated, or 'none' (cached results are still reported)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel encoder processes")
    ap.add_argument("--bd-fit", choices=["pchip", "cubic"], default="pchip", help="BD-rate fit (default pchip)")
    ap.add_argument("--title", default=None, help="plot title (default: the image folder's name)")
    ap.add_argument("--published", metavar="FILE.tsv",
                    help="published curves to draw and compare against on PSNR (codec, bpp, psnr_rgb_db; "
                         "e.g. lab/rd/kodak-768-published-rd.tsv, for the 24 Kodak images at 768x512)")
    ap.add_argument("--published-codecs", default=",".join(published.DEFAULT_CODECS), metavar="NAMES",
                    help="the curves of --published to use, comma-separated (default: %(default)s)")
    args = ap.parse_args()

    work = pathlib.Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    cache = Cache(work / "cache.json")
    points = plexus_points.unique(plexus_points.model_points(args.plexus, args.plexus_list)
                                  + plexus_points.level_points(args.plexus_levels)
                                  + plexus_points.quality_points(args.plexus_quality, args.quality_catalog))
    published_curves = read_published_curves(args.published, args.published_codecs)
    chosen = [] if args.codecs == "none" else [standard_codecs.codec_by_name(n.strip()) for n in args.codecs.split(",")]
    runner, runner_file = plexus_runner(args) if points else (None, None)
    started = time.time()
    originals = prepare_originals(args.images, work)
    print(f"compare: {len(originals)} images from {args.images}", file=sys.stderr)

    measurements, kinds = [], {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for codec in standard_codecs.CODECS:
            if codec in chosen:
                measurements += run_standard(codec, originals, work, cache, pool)
            else:  # not run now: what the cache holds for these images at today's settings
                measurements += cached_standard(codec, originals, cache)
            kinds[codec.name] = "standard"
        if points:
            binary_digest = sha256_of(runner_file)
            for point in points:
                measurements += run_plexus(point, runner, binary_digest, args.device, originals,
                                           work, cache, pool)
                kinds[f"plexus-{point.curve}"] = "plexus"

    measurements = [m for m in measurements if m["codec"] in kinds]
    curves = report.curves_from(measurements, kinds)
    curves.update(published.as_report_curves(published_curves))
    comparisons = report.bd_rates(curves, args.bd_fit)
    description = {"images": pathlib.Path(args.images).name, "count": len(originals),
                   "codecs": {c.name: {"options": c.options, "setting": c.setting_name,
                                       "version": standard_codecs.version_text(c)} for c in standard_codecs.CODECS
                              if c.name in curves},
                   "plexus": [plexus_points.describe(p, sha256_of(p.model)) for p in points],
                   "published": ({"file": str(args.published), "codecs": list(published_curves)}
                                 if args.published else None),
                   "bd_fit": args.bd_fit}
    report.write_csv(work / "points.csv", measurements)
    report.write_json(work / "curves.json", description, curves, comparisons)
    result_files.write_curves(work / "results", curves, run_record(args, len(originals)),
                              result_extras(curves, description, comparisons))
    table = report.markdown(curves, comparisons, len(originals), args.bd_fit)
    (work / "table.md").write_text(table)
    title = args.title or f"{pathlib.Path(args.images).name}: {len(originals)} images"
    report.plot_rd(curves, title, work)
    print(table)
    print(f"compare: {len(measurements)} measurements in {time.time() - started:.0f} s; "
          f"wrote {work}/points.csv, curves.json, table.md, rd-psnr.png, rd-ms-ssim.png, results/", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, RuntimeError, OSError) as error:  # a bad argument, a failed encoder, an unreadable file
        sys.exit(f"compare: {error}")

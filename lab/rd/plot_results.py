#!/usr/bin/env python3
"""The rate-distortion plots and BD-rate table from committed result files
(one JSON per codec, result_files.py), without encoding anything:

  python3 lab/rd/plot_results.py lab/results/codec/kodak-768/*.json \\
      --published lab/rd/kodak-768-published-rd.tsv --out lab/results/codec/kodak-768 \\
      --title "24 Kodak images (768x512), real files"

writes OUT/rd-psnr.png and OUT/rd-ms-ssim.png and prints the points and the
BD-rate of every Plexus curve against every other curve (pchip fit; --bd-fit
cubic for VCEG-M33's polynomial).
"""
import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import published  # noqa: E402
import report  # noqa: E402
import result_files  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="result files, one per codec or Plexus curve")
    ap.add_argument("--out", required=True, help="folder for rd-psnr.png and rd-ms-ssim.png")
    ap.add_argument("--title", default="", help="plot title")
    ap.add_argument("--published", metavar="FILE.tsv", help="published curves to draw and compare against (PSNR)")
    ap.add_argument("--published-codecs", default=",".join(published.DEFAULT_CODECS), metavar="NAMES",
                    help="the curves of --published to use, comma-separated (default: %(default)s)")
    ap.add_argument("--bd-fit", choices=["pchip", "cubic"], default="pchip")
    args = ap.parse_args()

    curves = result_files.read_curves(args.files)
    if args.published:
        chosen = [n.strip() for n in args.published_codecs.split(",") if n.strip()]
        selected = published.select(published.read_published(args.published), chosen, args.published)
        curves.update(published.as_report_curves(selected))
    comparisons = report.bd_rates(curves, args.bd_fit)
    counts = {p["images"] for c in curves.values() for p in c["points"]} - {None}
    print(report.markdown(curves, comparisons, counts.pop() if len(counts) == 1 else "the", args.bd_fit))

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.plot_rd(curves, args.title, out)
    print(f"plot_results: wrote {out}/rd-psnr.png and {out}/rd-ms-ssim.png", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, OSError) as error:
        sys.exit(f"plot_results: {error}")

"""The standard image codecs of the comparison: for each, the settings that
span about 0.1 to 1.5 bpp on photographs (Kodak), and the command lines that
encode one original into a real file and decode that file back to an 8-bit
RGB image, all with Debian 12's command-line tools (tools/install-deps.sh --codecs).

Chroma: JPEG and WebP use their usual 4:2:0 (WebP's lossy mode has no other);
AVIF is encoded 4:4:4, because quality is measured on full-resolution RGB,
the learned codecs code full-resolution RGB, and AVIF's 4:2:0 would lose
chroma detail no setting can buy back, making it look worse on RGB PSNR than
it is; JPEG 2000 codes RGB through its irreversible colour transform, with
no subsampling.
"""
import subprocess
from dataclasses import dataclass
from typing import Callable, List


@dataclass(frozen=True)
class Codec:
    name: str               # used in file names, the cache and the CSV
    label: str              # for the plot and table
    setting_name: str       # what the setting is (quality, quantiser, ...)
    settings: List[int]     # from low rate to high rate
    extension: str          # of the compressed file
    input_format: str       # "ppm" or "png": what the encoder reads
    options: str            # the fixed options, for the table's notes
    encode: Callable[[str, str, int], List[str]]   # (input, compressed, setting) -> argv
    decode: Callable[[str, str], List[str]]        # (compressed, decoded) -> argv; decoded is .ppm or .png
    decoded_format: str     # "ppm" or "png"
    version: List[str]      # argv printing the version


AVIF_SPEED = 6  # avifenc's default; speed 4 costs 5x the time, speed 2 16x, on a 500x500 image

CODECS = [
    # libjpeg-turbo reads PPM, not PNG; -optimize: optimal Huffman tables, as any careful encoder.
    Codec("jpeg", "JPEG (libjpeg-turbo)", "quality", [3, 5, 10, 15, 20, 30, 40, 50, 60, 70, 75, 80],
          "jpg", "ppm", "cjpeg -optimize, 4:2:0",
          lambda src, out, q: ["cjpeg", "-quality", str(q), "-optimize", "-outfile", out, src],
          lambda src, out: ["djpeg", "-ppm", "-outfile", out, src], "ppm",
          ["cjpeg", "-version"]),
    Codec("webp", "WebP (libwebp)", "quality", [0, 2, 5, 10, 15, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90],
          "webp", "png", "cwebp -m 6, 4:2:0",
          lambda src, out, q: ["cwebp", "-quiet", "-m", "6", "-q", str(q), src, "-o", out],
          lambda src, out: ["dwebp", "-quiet", src, "-o", out], "png",
          ["cwebp", "-version"]),
    # -r: compression ratio against 24-bit RGB, so 24 / r bpp (0.1 to 1.5); -I: the 9/7
    # irreversible wavelet, JPEG 2000's lossy mode (the default 5/3 is for lossless).
    Codec("jpeg2000", "JPEG 2000 (OpenJPEG)", "ratio", [240, 160, 120, 80, 60, 48, 40, 30, 24, 20, 16],
          "jp2", "ppm", "opj_compress -I -r R, RGB",
          lambda src, out, r: ["opj_compress", "-i", src, "-o", out, "-I", "-r", str(r)],
          lambda src, out: ["opj_decompress", "-i", src, "-o", out], "ppm",
          ["opj_compress", "-h"]),
    # --min Q --max Q: one constant quantiser (0-63, 63 coarsest); aom, the reference AV1 encoder.
    Codec("avif", "AVIF (libavif, aom)", "quantiser", [60, 57, 54, 51, 48, 45, 42, 39, 36, 33, 30, 27, 24, 21],
          "avif", "png", f"avifenc -c aom -s {AVIF_SPEED} -y 444 --min Q --max Q",
          lambda src, out, q: ["avifenc", "-c", "aom", "-s", str(AVIF_SPEED), "-j", "1", "-y", "444",
                               "-d", "8", "--min", str(q), "--max", str(q),
                               "--ignore-exif", "--ignore-xmp", "--ignore-icc", src, out],
          lambda src, out: ["avifdec", "-j", "1", "-d", "8", src, out], "png",
          ["avifenc", "--version"]),
]


def codec_by_name(name):
    for codec in CODECS:
        if codec.name == name:
            return codec
    raise ValueError(f"unknown codec '{name}' (known: {', '.join(c.name for c in CODECS)})")


def version_text(codec):
    """The tool's version line(s), part of the cache key; '' when it is missing."""
    try:
        done = subprocess.run(codec.version, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return ""
    text = (done.stdout + done.stderr).strip()
    if codec.name == "jpeg2000":  # opj_compress -h: the version is on the line naming the library
        text = next((line for line in text.splitlines() if "openjp2" in line.lower() or "version" in line.lower()), text[:200])
    return text.splitlines()[0] if text else ""


def run(argv):
    """Runs one encoder or decoder; a failure names the command and its message."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError(f"'{argv[0]}' is not installed (tools/install-deps.sh --codecs installs the codecs)")
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[:500]}")

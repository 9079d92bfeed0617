#!/usr/bin/env bash
# Makes the 500x500 centre crops of the Kodak images that docs/results.md
# and data/eval-sample/ use, from the 24 originals (768x512 or 512x768 PNGs,
# the Kodak Lossless True Color Image Suite: r0k.us/graphics/kodak/):
#
#   tools/kodak-crops.sh KODAK_DIR OUT_DIR
#
# Each KODAK_DIR/*.png becomes OUT_DIR/<same name>, its centre 500x500
# pixels (for 768x512: columns 134..633, rows 6..505), unchanged (PNG is
# lossless). Needs ImageMagick's convert (Debian: apt-get install imagemagick).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 KODAK_DIR OUT_DIR" >&2
  exit 2
fi
if ! convert -version 2> /dev/null | grep ImageMagick > /dev/null; then
  echo "kodak-crops: ImageMagick's 'convert' is missing (Debian: sudo apt-get install imagemagick)" >&2
  exit 1
fi
shopt -s nullglob
images=("$1"/*.png)
if [ ${#images[@]} -eq 0 ]; then
  echo "kodak-crops: no .png images in '$1'" >&2
  exit 1
fi
mkdir -p "$2"
for image in "${images[@]}"; do
  size=$(identify -format '%wx%h' "$image")
  case $size in
    768x512 | 512x768) ;;
    *) echo "kodak-crops: '$image' is $size, not a Kodak original (768x512 or 512x768)" >&2; exit 1 ;;
  esac
  convert "$image" -gravity center -crop 500x500+0+0 +repage "$2/$(basename "$image")"
done
echo "kodak-crops: ${#images[@]} image(s) cropped to 500x500 in '$2'"

#!/usr/bin/env bash
# Installs what lab/rd/compare.py needs, only what is missing (Debian 12):
# the encoders and decoders (libjpeg-turbo's cjpeg/djpeg, libwebp's
# cwebp/dwebp, OpenJPEG's opj_compress/opj_decompress, libavif's
# avifenc/avifdec) and numpy, Pillow, matplotlib. Not part of the build or of
# tools/install-deps.sh: only the comparison needs them.
set -euo pipefail
packages=(libjpeg-turbo-progs webp libopenjp2-tools libavif-bin
          python3-numpy python3-pil python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "lab/rd/install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "lab/rd/install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Installs the Debian 12 packages Plexus builds against, only those missing.
# The CUDA toolkit is optional and not installed here: without nvcc the build
# is CPU-only. With --fuzz (the test command), also clang and its
# libFuzzer/sanitizer runtimes for the fuzz build (tools/fuzz.sh), clang-tidy
# (tools/tidy.sh), and ImageMagick for tools/kodak-crops.sh and its test.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config
          libeigen3-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
          libjpeg62-turbo-dev libpng-dev libgtest-dev
          libopenmpi-dev openmpi-bin  # data-parallel training on CPUs, and its mpirun test
          python3-matplotlib   # tools/plot_metrics.py and its test
          pybind11-dev python3-dev python3-numpy python3-pytest  # the Python module plexus.codec and its tests
          clang-format)        # tools/format.sh and the suite's formatting check
# With --codecs, what the rate-distortion comparison (lab/rd/compare.py) needs:
# the standard codecs' command-line encoders and decoders (libjpeg-turbo's
# cjpeg/djpeg, libwebp's cwebp/dwebp, OpenJPEG's opj_compress/opj_decompress,
# libavif's avifenc/avifdec) and numpy, Pillow.
for option in "$@"; do
  case "$option" in
    --fuzz) packages+=(clang clang-tidy libclang-rt-dev imagemagick) ;;
    --codecs) packages+=(libjpeg-turbo-progs webp libopenjp2-tools libavif-bin python3-numpy python3-pil) ;;
    *) echo "install-deps: unknown option '$option' (options: --fuzz, --codecs)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

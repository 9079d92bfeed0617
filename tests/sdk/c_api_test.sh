#!/usr/bin/env bash
# The codec's C API end to end, as an application developer meets it:
#   1. install the already-built Plexus to a temporary prefix;
#   2. build examples/c-api/compress_png.c against it with pkg-config
#      (plexus-codec.pc) and with CMake (find_package(plexus COMPONENTS codec));
#   3. check that they load no training or image-file library of Plexus
#      (libplexus_train, libplexus_data; nor NCCL, MPI or libjpeg), then
#      run both on a bundled image at quality 3: the file must be the bytes
#      `plexus-ae compress --quality 3 --metadata none` writes, and the
#      decoded pixels those of `plexus-ae decompress` of the same file.
# Nothing of Plexus is rebuilt.
#
# usage: c_api_test.sh <plexus build dir> <plexus source dir> [cmake]
set -euo pipefail

build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
cmake_command=${3:-cmake}

work=$(mktemp -d "${TMPDIR:-/tmp}/plexus-c-api-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }

step "install Plexus to $prefix"
"$cmake_command" --install "$build_dir" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install failed; build every target first (cmake --build $build_dir)"; }
for file in include/plexus/codec.h lib/libplexus_codec.so lib/pkgconfig/plexus-codec.pc bin/plexus-ae \
            share/plexus/autoencoder/trained/quality-catalog.json; do
  [[ -e $prefix/$file ]] || fail "$file was not installed"
done
command -v pkg-config > /dev/null || { echo "pkg-config is not installed: skipped"; exit 77; }
pkg-config --exists libpng || { echo "libpng's pkg-config file is missing: skipped"; exit 77; }

step "build the example with pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[[ $(pkg-config --modversion plexus-codec) == "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/plexus-codec.pc")" ]]
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -Werror "$source_dir/examples/c-api/compress_png.c" \
  $(pkg-config --cflags --libs plexus-codec libpng) -o "$work/with-pkg-config"

step "build the example with CMake against the installed package"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
"$cmake_command" -S "$source_dir/examples/c-api" -B "$work/cmake-build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep -q "^plexus_DIR:PATH=$prefix/lib/cmake/plexus$" "$work/cmake-build/CMakeCache.txt" ||
  fail "find_package(plexus) did not use the installed package"
"$cmake_command" --build "$work/cmake-build"

image=$source_dir/data/eval-sample/kodim04.png
ae=$prefix/bin/plexus-ae
step "plexus-ae compress --quality 3, then decompress (the reference)"
"$ae" compress --quality 3 --metadata none --device cpu "$image" -o "$work/cli.pxae"
"$ae" decompress --device cpu "$work/cli.pxae" -o "$work/cli.png"

# The pixels of two PNGs, compared through libpng's simplified API.
cat > "$work/same_pixels.c" <<'C'
#include <png.h>
#include <stdlib.h>
#include <string.h>
static unsigned char* read_rgb(const char* path, png_image* image) {
  memset(image, 0, sizeof *image);
  image->version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(image, path)) return NULL;
  image->format = PNG_FORMAT_RGB;
  unsigned char* pixels = malloc(PNG_IMAGE_SIZE(*image));
  return pixels && png_image_finish_read(image, NULL, pixels, 0, NULL) ? pixels : NULL;
}
int main(int argc, char** argv) {
  png_image a, b;
  unsigned char *pa = read_rgb(argv[1], &a), *pb = read_rgb(argv[2], &b);
  return argc == 3 && pa && pb && a.width == b.width && a.height == b.height &&
                 memcmp(pa, pb, PNG_IMAGE_SIZE(a)) == 0 ? 0 : 1;
}
C
# shellcheck disable=SC2046
cc -std=c99 "$work/same_pixels.c" $(pkg-config --cflags --libs libpng) -o "$work/same_pixels"
"$work/same_pixels" "$work/cli.png" "$image" && fail "the comparison cannot tell a decoded image from the original"

for example in with-pkg-config cmake-build/compress_png; do
  step "$example: compress and decompress through the C API"
  name=$(basename "$example")
  # The decoder-only link set: the program loads neither training nor image-file code of Plexus.
  loaded=$(LD_LIBRARY_PATH=$prefix/lib ldd "$work/$example")
  grep -q "libplexus_codec.so => $prefix/lib/" <<<"$loaded" || fail "$example does not load the installed codec"
  ! grep -E "libplexus_(train|data)|libnccl|libmpi|libjpeg" <<<"$loaded" ||
    fail "$example loads training or image-file libraries through libplexus_codec"
  LD_LIBRARY_PATH=$prefix/lib "$work/$example" "$image" "$work/$name.pxae" "$work/$name.png" 3
  cmp "$work/$name.pxae" "$work/cli.pxae" || fail "$example wrote other bytes than plexus-ae compress --quality 3"
  "$work/same_pixels" "$work/$name.png" "$work/cli.png" ||
    fail "$example decoded other pixels than plexus-ae decompress"
done

echo; echo "PASS: installed, built the C example with pkg-config and CMake, same file and pixels as plexus-ae"

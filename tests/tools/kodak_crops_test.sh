#!/usr/bin/env bash
# tools/kodak-crops.sh on generated stand-ins for Kodak originals: a 768x512
# and a 512x768 image of distinct pixels give 500x500 crops whose corners
# are the originals' pixels at (134, 6) and (6, 134); an image of another size
# is refused. A 'convert' that is not ImageMagick's (convert -version does
# not name it) is refused by name, and counts as none here: the rest skips
# (exit 77) without ImageMagick.
# Usage: kodak_crops_test.sh SOURCE_DIR
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/other-convert"
printf '#!/bin/sh\necho "some other convert"\n' > "$work/other-convert/convert"
chmod +x "$work/other-convert/convert"
if PATH="$work/other-convert:$PATH" bash "$1/tools/kodak-crops.sh" "$work" "$work/none" > "$work/log" 2>&1; then
  echo "a convert that is not ImageMagick's was accepted"; exit 1
fi
grep -q "ImageMagick's 'convert' is missing" "$work/log" || { cat "$work/log"; exit 1; }
convert -version 2> /dev/null | grep ImageMagick > /dev/null || { echo "kodak_crops_test: no ImageMagick, skipped"; exit 77; }
mkdir -p "$work/in"
# Red grows with x and green with y, so every pixel names its position.
convert -size 768x512 gradient:black-lime -rotate 0 \( -size 512x768 gradient:black-red -rotate 90 \) \
  -compose plus -composite "$work/in/wide.png"
convert -size 512x768 gradient:black-lime \( -size 768x512 gradient:black-red -rotate 90 \) \
  -compose plus -composite "$work/in/tall.png"
bash "$1/tools/kodak-crops.sh" "$work/in" "$work/out" > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
pixel() { convert "$1" -format "%[pixel:p{$2,$3}]" info:; }
for case in "wide 134 6" "tall 6 134"; do
  read -r name x y <<< "$case"
  [ "$(identify -format '%wx%h' "$work/out/$name.png")" = 500x500 ] || { echo "$name: not 500x500"; exit 1; }
  for corner in "0 0" "499 499"; do
    read -r cx cy <<< "$corner"
    want=$(pixel "$work/in/$name.png" $((x + cx)) $((y + cy)))
    got=$(pixel "$work/out/$name.png" "$cx" "$cy")
    [ "$want" = "$got" ] || { echo "$name ($cx, $cy): $got, expected $want"; exit 1; }
  done
done
convert -size 640x480 xc:gray "$work/in/other.png"
if bash "$1/tools/kodak-crops.sh" "$work/in" "$work/out2" > "$work/log" 2>&1; then
  echo "a 640x480 image was accepted"; exit 1
fi
grep -q "not a Kodak original" "$work/log" || { cat "$work/log"; exit 1; }
echo "kodak_crops_test: passed"

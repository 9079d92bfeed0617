#!/usr/bin/env bash
# tools/plot_metrics.py on a short metrics log with training and validation
# rows, and on rate-distortion input: each writes a PNG; no arguments, a
# missing file and a Python without matplotlib fail with a message instead
# of a traceback. Skips (77) the plotting when no Python here has matplotlib.
set -euo pipefail
source_dir=$1
script=$source_dir/tools/plot_metrics.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/metrics.jsonl" <<'LOG'
{"kind":"train","step":10,"loss":9.1,"mse":0.02,"bpp":1.2,"psnr":17.0,"lr":0.0001,"images_per_second":5,"elapsed_seconds":2}
{"kind":"train","step":20,"loss":7.5,"mse":0.015,"bpp":1.1,"psnr":18.2,"lr":0.0001,"images_per_second":5,"elapsed_seconds":4}
{"kind":"val","step":20,"psnr":18.9,"bpp":1.05,"loss":7.0,"images":3}
{"kind":"train","step":30,"loss":6.2,"mse":0.011,"bpp":1.0,"psnr":19.6,"lr":0.0001,"images_per_second":5,"elapsed_seconds":6}
LOG

# A Python without matplotlib (a module of that name that fails to import,
# as the real one does when it is missing): how to install it, a non-zero
# exit, no traceback.
mkdir "$work/no-matplotlib"
echo 'raise ModuleNotFoundError("No module named matplotlib", name="matplotlib")' > "$work/no-matplotlib/matplotlib.py"
for arguments in "$work/metrics.jsonl" "--rd $work/metrics.jsonl"; do
  # shellcheck disable=SC2086 # word splitting of the arguments is intended
  if PYTHONPATH="$work/no-matplotlib" python3 "$script" $arguments > "$work/without.txt" 2>&1; then
    echo "plotting without matplotlib must fail"; exit 1
  fi
  for hint in "matplotlib is not installed for this Python" "-m pip install matplotlib" \
              "apt-get install python3-matplotlib"; do
    grep -qe "$hint" "$work/without.txt" || { echo "no '$hint' in:"; cat "$work/without.txt"; exit 1; }
  done
  if grep -q Traceback "$work/without.txt"; then cat "$work/without.txt"; exit 1; fi
done

# The first Python that has matplotlib (a user's python3 may not be Debian's).
python=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import matplotlib" 2>/dev/null; then python=$candidate; break; fi
done
if [ -z "$python" ]; then
  echo "matplotlib is not installed (Debian: python3-matplotlib; tools/install-deps.sh installs it)"
  exit 77
fi
"$python" "$script" "$work/metrics.jsonl"
test -s "$work/training-curves.png" || { echo "no training-curves.png"; exit 1; }
# Its first bytes are the PNG signature.
[ "$(head -c 4 "$work/training-curves.png" | tail -c 3)" = "PNG" ] || { echo "not a PNG"; exit 1; }

echo '{"model":"m","step":30,"data":"kodak","images":[],"mean_psnr":27.5,"mean_bpp":0.4}' > "$work/eval.json"
echo '{"folder":"kodak","rows":[{"quality":10,"mean_bpp":0.3,"mean_psnr":26.0},{"quality":50,"mean_bpp":0.9,"mean_psnr":31.0}]}' > "$work/jpeg.json"
"$python" "$script" --rd "$work/eval.json" "$work/jpeg.json" --out "$work/rd.png"
test -s "$work/rd.png" || { echo "no rd.png"; exit 1; }

# Errors: usage, not a traceback.
if "$python" "$script" > "$work/noargs.txt" 2>&1; then echo "no arguments must fail"; exit 1; fi
grep -q "usage:" "$work/noargs.txt" || { cat "$work/noargs.txt"; exit 1; }
if "$python" "$script" "$work/missing.jsonl" > "$work/missing.txt" 2>&1; then echo "a missing file must fail"; exit 1; fi
grep -q "no file" "$work/missing.txt" || { cat "$work/missing.txt"; exit 1; }
if grep -q Traceback "$work/noargs.txt" "$work/missing.txt"; then echo "traceback"; exit 1; fi
echo "plot_metrics_test: passed"

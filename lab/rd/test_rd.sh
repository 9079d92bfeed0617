#!/usr/bin/env bash
# The numeric parts of lab/rd (PSNR, MS-SSIM, BD-rate, the curve averaging):
# lab/rd/test_rd.py, which needs python3 and numpy only (skips, exit 77,
# without numpy).
set -euo pipefail
source_dir=$1
# The first Python that has numpy (a user's python3 may not be Debian's).
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import numpy" 2>/dev/null; then exec "$candidate" "$source_dir/lab/rd/test_rd.py"; fi
done
echo "numpy is not installed (Debian: python3-numpy; tools/install-deps.sh brings it with python3-matplotlib)"
exit 77

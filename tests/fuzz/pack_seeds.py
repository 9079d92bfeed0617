#!/usr/bin/env python3
"""Packs a folder of fuzzer seeds into tests/fuzz/corpus/NAME.zip, the form the corpora are committed in.

usage: python3 tests/fuzz/pack_seeds.py FOLDER tests/fuzz/corpus/NAME.zip

The entries are the folder's files in name order with a fixed date, so the same seeds give the same zip.
"""
import os
import sys
import zipfile


def main():
    if len(sys.argv) != 3 or not os.path.isdir(sys.argv[1]) or not sys.argv[2].endswith(".zip"):
        sys.exit(__doc__.strip().splitlines()[2])
    folder, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    if not names:
        sys.exit(f"pack_seeds: no files in '{folder}'")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            entry = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            with open(os.path.join(folder, name), "rb") as seed:
                archive.writestr(entry, seed.read())
    print(f"pack_seeds: {len(names)} seeds -> {out}")


if __name__ == "__main__":
    main()

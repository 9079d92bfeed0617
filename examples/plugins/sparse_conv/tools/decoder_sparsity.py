#!/usr/bin/env python3
"""The step and the decoder's weight sparsity of a plexus-ae model.

Reads the safetensors file directly (standard library only): the fraction of
exactly-zero elements over the weights of g_s0, g_s1 and g_s2 together.

usage: decoder_sparsity.py MODEL [--row NAME]   (--row: one table line for train-pruned.sh)
"""
import argparse
import array
import json
import struct
import sys

DECODER_WEIGHTS = ("g_s0.weight", "g_s1.weight", "g_s2.weight")


def read(path):
    with open(path, "rb") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
        data = f.read()
    return header, data


def decoder_sparsity(header, data):
    zeros = total = 0
    for name in DECODER_WEIGHTS:
        entry = header[name]
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "F32":
            values = array.array("f")
            values.frombytes(data[begin:end])
            if sys.byteorder != "little":
                values.byteswap()
        elif entry["dtype"] == "F16":
            values = [v for (v,) in struct.iter_unpack("<e", data[begin:end])]
        else:
            raise SystemExit(f"{name}: expected F32 or F16, got {entry['dtype']}")
        zeros += sum(1 for v in values if v == 0.0)
        total += len(values)
    return zeros / total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--row", help="print one line: NAME STEPS SPARSITY MODEL")
    args = parser.parse_args()
    header, data = read(args.model)
    step = header.get("__metadata__", {}).get("step", "?")
    sparsity = decoder_sparsity(header, data)
    if args.row:
        print(f"{args.row:<12} {step:>8} {100 * sparsity:>17.2f}%  {args.model}")
    else:
        print(f"step {step}, decoder sparsity {100 * sparsity:.2f}%")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Rewrites a pruned plexus-ae model so that its decoder runs on the sparse layers.

Every PrunedConv2d / PrunedConvTranspose2d node of the model spec stored in
the file becomes SparseConv2d / SparseConvTranspose2d (the pruning schedule
params dropped, FORMAT added) and its mask tensor is dropped: the masked
weights are already exactly zero, and the sparse layers read "weight" and
"bias" by the same names. Standard library only.

usage: to_sparse_decoder.py PRUNED_MODEL OUT_MODEL [--format rows|coo]
"""
import argparse
import json
import struct

PRUNING_PARAMS = ("sparsity", "start_step", "end_step", "prune_every")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--format", default="rows", choices=("rows", "coo"))
    args = parser.parse_args()
    with open(args.model, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    spec = json.loads(metadata["model_spec"])
    converted = []
    for node in spec["nodes"]:
        if node["type"] in ("PrunedConv2d", "PrunedConvTranspose2d"):
            node["type"] = node["type"].replace("Pruned", "Sparse")
            for key in PRUNING_PARAMS:
                node["params"].pop(key, None)
            node["params"]["format"] = args.format
            converted.append(node["name"])
    if not converted:
        raise SystemExit(f"{args.model}: no pruned layer in its model spec")
    metadata["model_spec"] = json.dumps(spec)
    dropped = {name + ".mask" for name in converted}
    out_header, chunks, offset = {}, [], 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        if name in dropped:
            continue
        begin, end = entry["data_offsets"]
        chunks.append(data[begin:end])
        out_header[name] = dict(entry, data_offsets=[offset, offset + end - begin])
        offset += end - begin
    out_header["__metadata__"] = metadata
    text = json.dumps(out_header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(args.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)
    print(f"{args.out}: {', '.join(converted)} now {args.format} sparse layers")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cuts checkpoint_fuzz's seeds from a real meshtrain step folder.

Usage: make_checkpoint_seeds.py STEP_DIR OUT_DIR

STEP_DIR: a one-rank `tiny` checkpoint, e.g. from
  meshtrain train --model tiny --steps 1 --local-batch-size 1 --seq-len 16 \
    --checkpoint.enable --checkpoint.folder /tmp/ck --dump-folder /tmp/out --quiet
  (STEP_DIR is then /tmp/ck/step-1).

A seed is the input checkpoint_fuzz.cpp splits: `.metadata`, one 0xFF byte, `__0_0.distcp`.
The whole checkpoint is 1.7 MB, so each seed keeps a few real tensors (or their first rows),
moved into a small data file with the metadata's offsets rewritten to match. Every seed reads
cleanly: the checksums are the real ones where a chunk's bytes are kept as they were, and are
recomputed (mix64, contract/hash.h) where a seed cuts a tensor into new chunks.
"""
import json
import os
import struct
import sys

MASK = (1 << 64) - 1
DATA_FILE = "__0_0.distcp"


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def mix64(data):
    h = 1469598103934665603 ^ len(data)
    for i in range(0, len(data), 8):
        word = int.from_bytes(data[i:i + 8], "little")  # the tail word is zero-padded, as in hash.h
        h = ((h ^ word) * 0x100000001B3) & MASK
    return splitmix64(h)


def leaf_bytes(row_bytes):
    # docs/checkpoint.md: an eighth of the innermost row, rounded down to a power of two in 64 B..4 KiB.
    leaf = 64
    while leaf * 2 <= min(row_bytes // 8, 4096):
        leaf *= 2
    return leaf


class Seed:
    """A data file being built and the metadata keys that point into it."""

    def __init__(self, source_doc):
        self.doc = {k: v for k, v in source_doc.items() if k != "keys"}
        self.doc["keys"] = {}
        self.data = bytearray()

    def add_object(self, source_doc, key):
        self.doc["keys"][key] = source_doc["keys"][key]

    def add_chunk(self, chunks, offsets, sizes, values, hashes=None, leaf=None, checksums=True):
        """Appends a chunk's bytes and (unless checksums is False) its leaf checksums."""
        chunk = {"offsets": offsets, "sizes": sizes, "file": DATA_FILE, "byte_offset": len(self.data),
                 "byte_length": len(values)}
        self.data += values
        if checksums:
            if hashes is None:
                leaf = leaf_bytes(sizes[-1] * 4)
                hashes = b"".join(struct.pack("<Q", mix64(values[at:at + leaf])) for at in range(0, len(values), leaf))
            chunk.update(leaf_bytes=leaf, hash_offset=len(self.data))
            self.data += hashes
        chunks.append(chunk)

    def write(self, path):
        metadata = json.dumps(self.doc, indent=1, sort_keys=True).encode()  # meshtrain's own layout
        with open(path, "wb") as f:
            f.write(metadata + b"\xff" + bytes(self.data))


def main():
    step_dir, out_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(step_dir, ".metadata")) as f:
        doc = json.load(f)
    with open(os.path.join(step_dir, DATA_FILE), "rb") as f:
        blob = f.read()
    keys = doc["keys"]
    objects = [k for k, v in keys.items() if v["kind"] != "tensor"]

    def rows(key, n):
        """The first n rows of a one-chunk 2-D tensor: its bytes, row length, and real checksums."""
        (c,) = keys[key]["chunks"]
        row = keys[key]["shape"][1] * 4
        values = blob[c["byte_offset"]:c["byte_offset"] + n * row]
        leaves = (n * row) // c["leaf_bytes"]
        hashes = blob[c["hash_offset"]:c["hash_offset"] + 8 * leaves]
        assert hashes == b"".join(struct.pack("<Q", mix64(values[i * c["leaf_bytes"]:(i + 1) * c["leaf_bytes"]]))
                                  for i in range(leaves)), "mix64 here differs from contract/hash.h"
        return values, row, hashes, c["leaf_bytes"]

    def tensor(seed, key, shape):
        seed.doc["keys"][key] = {"kind": "tensor", "dtype": "float32", "shape": shape, "chunks": []}
        return seed.doc["keys"][key]["chunks"]

    os.makedirs(out_dir, exist_ok=True)

    # Every 1-D tensor (norm weights and their Adam moments) as saved, and the object keys.
    seed = Seed(doc)
    for k in objects:
        seed.add_object(doc, k)
    for k, v in sorted(keys.items()):
        if v["kind"] == "tensor" and len(v["shape"]) == 1:
            (c,) = v["chunks"]
            values = blob[c["byte_offset"]:c["byte_offset"] + c["byte_length"]]
            hashes = blob[c["hash_offset"]:c["hash_offset"] + 8 * (c["byte_length"] // c["leaf_bytes"])]
            seed.add_chunk(tensor(seed, k, v["shape"]), [0], v["shape"], values, hashes, c["leaf_bytes"])
    seed.write(os.path.join(out_dir, "seed-norms"))

    # wk's first 4 rows in two row chunks, as a [dp:2] save lays them out: real bytes and checksums.
    wk = "model.layers.0.attention.wk.weight"
    values, row, hashes, leaf = rows(wk, 4)
    per_row = row // leaf * 8
    seed = Seed(doc)
    seed.add_object(doc, "train_state")
    chunks = tensor(seed, wk, [4, 64])
    seed.add_chunk(chunks, [0, 0], [2, 64], values[:2 * row], hashes[:2 * per_row], leaf)
    seed.add_chunk(chunks, [2, 0], [2, 64], values[2 * row:], hashes[2 * per_row:], leaf)
    seed.write(os.path.join(out_dir, "seed-row-chunks"))

    # The same rows in two column chunks, as a [tp:2] save of a row-wise weight lays them out.
    seed = Seed(doc)
    chunks = tensor(seed, wk, [4, 64])
    for first in (0, 32):
        cols = b"".join(values[r * row + first * 4:r * row + (first + 32) * 4] for r in range(4))
        seed.add_chunk(chunks, [0, first], [4, 32], cols)
    seed.write(os.path.join(out_dir, "seed-column-chunks"))

    # w2's first 3 rows (768-byte rows) in uneven row chunks, the second one saved without checksums.
    w2 = "model.layers.0.feed_forward.w2.weight"
    values, row, _, _ = rows(w2, 3)
    seed = Seed(doc)
    seed.add_object(doc, "lr_scheduler")
    chunks = tensor(seed, w2, [3, 192])
    seed.add_chunk(chunks, [0, 0], [2, 192], values[:2 * row])
    seed.add_chunk(chunks, [2, 0], [1, 192], values[2 * row:], checksums=False)
    seed.write(os.path.join(out_dir, "seed-uneven-chunks"))


if __name__ == "__main__":
    main()

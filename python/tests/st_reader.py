# SPDX-License-Identifier: MIT
"""A minimal safetensors reader written from the format's specification
(huggingface/safetensors, README "Format"), sharing no code with tierfs:
it is the independent check that tierfs shards are plain safetensors.

    u64 little-endian N | N bytes of UTF-8 JSON | byte buffer

The JSON object maps tensor names to {"dtype", "shape", "data_offsets":
[begin, end)} relative to the buffer, plus an optional "__metadata__" of
string to string.  Tensors must tile the buffer: sorted by offset, no
holes, no overlaps, and the file ends with the last tensor.
"""
import json
import struct

MAX_HEADER = 100_000_000
BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}


class SafetensorsError(ValueError):
    pass


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise SafetensorsError(f"duplicate key {k!r}")
        d[k] = v
    return d


def parse(data):
    """(metadata, {name: (dtype, shape, bytes)}) of a whole file."""
    if len(data) < 8:
        raise SafetensorsError("shorter than the header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise SafetensorsError(f"header length {n} beyond the file")
    raw = data[8:8 + n]
    if not raw.startswith(b"{"):
        raise SafetensorsError("header does not start with '{'")
    header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_dups)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not an object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise SafetensorsError("__metadata__ is not string to string")
    spans = []
    for name, t in header.items():
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if dtype not in BITS:
            raise SafetensorsError(f"{name}: unknown dtype {dtype}")
        if not all(isinstance(x, int) and x >= 0 for x in shape):
            raise SafetensorsError(f"{name}: bad shape")
        begin, end = offs
        count = 1
        for x in shape:
            count *= x
        if (count * BITS[dtype]) % 8 or end - begin != count * BITS[dtype] // 8:
            raise SafetensorsError(f"{name}: offsets do not fit the shape")
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise SafetensorsError(f"{name}: hole or overlap at {begin}")
        at = end
    if 8 + n + at != len(data):
        raise SafetensorsError("the file does not end with the last tensor")
    buf = memoryview(data)[8 + n:]
    tensors = {name: (t["dtype"], tuple(t["shape"]),
                      bytes(buf[t["data_offsets"][0]:t["data_offsets"][1]]))
               for name, t in header.items()}
    return meta, tensors


def load(path):
    with open(path, "rb") as f:
        return parse(f.read())

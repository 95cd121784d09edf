# SPDX-License-Identifier: Apache-2.0
"""Minimal safetensors writer/reader for mlpd's model tools (numpy only).

Debian 12 ships no safetensors Python package, and the format is small:
8-byte little-endian header length, a JSON header, then the raw data. Tensors
are written in the order given, packed with no gaps, as the format requires.
"""
import json
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16}


def f32_to_bf16_bits(a):
    """Round float32 to bfloat16 (nearest even); returns uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(a, dtype):
    """Bytes of array `a` stored as safetensors dtype F32, F16 or BF16."""
    if dtype == "BF16":
        return f32_to_bf16_bits(a).tobytes()
    return np.ascontiguousarray(a, dtype=_NP[dtype]).tobytes()


def write(path, tensors, metadata=None, dtype="F32"):
    """tensors: list of (name, ndarray) or (name, ndarray, dtype)."""
    header = {}
    blobs = []
    pos = 0
    for t in tensors:
        name, arr = t[0], np.asarray(t[1])
        dt = t[2] if len(t) > 2 else dtype
        blob = encode(arr, dt)
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [pos, pos + len(blob)]}
        blobs.append(blob)
        pos += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # keep the data area 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path):
    """Returns ({name: float32 ndarray}, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        buf = data[b:e]
        if info["dtype"] == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(buf, dtype=np.uint16))
        else:
            a = np.frombuffer(buf, dtype=_NP[info["dtype"]]).astype(np.float32)
        out[name] = a.reshape(info["shape"])
    return out, meta

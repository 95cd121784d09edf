#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora in tests/fuzz/corpus/<harness>/ (checked in).

Deterministic and dependency-free: protobuf is encoded by hand here (a few
varints), so the seeds include what no protobuf library would write (wrong
wire types, duplicated fields, the issue-10 finding). Rerun after changing
a seed (it replaces every seed-* file; files are named by content):

    /usr/bin/python3 tests/fuzz/make_corpus.py

Regression inputs from fuzzing runs are added by hand (regress-*), and this
script leaves them alone.
"""
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def key(tag, wt):
    return varint(tag << 3 | wt)


def f_varint(tag, v):
    return key(tag, 0) + varint(v & ((1 << 64) - 1))


def f_bytes(tag, b):
    return key(tag, 2) + varint(len(b)) + b


def f_fixed32(tag, b4):
    return key(tag, 5) + b4


def f_fixed64(tag, b8):
    return key(tag, 1) + b8


F32, F16, BF16 = 1, 2, 3


def tensor(dtype, shape, data=None, region=None, packed=True):
    m = f_varint(1, dtype)
    if packed:
        m += f_bytes(2, b"".join(varint(d & ((1 << 64) - 1)) for d in shape))
    else:
        m += b"".join(f_varint(2, d) for d in shape)
    if data is not None:
        m += f_bytes(3, data)
    if region is not None:
        m += f_bytes(4, region)
    return m


def region_ref(name, offset, length):
    return f_bytes(1, name) + f_varint(2, offset) + f_varint(3, length)


def request(rid, kind_tag, body):
    return f_varint(1, rid) + f_bytes(kind_tag, body)


def infer(t, timeout=0, out_dtype=0, out_region=None):
    m = f_bytes(1, t)
    if timeout:
        m += f_varint(2, timeout)
    if out_dtype:
        m += f_varint(3, out_dtype)
    if out_region is not None:
        m += f_bytes(4, out_region)
    return m


def rpc_seeds():
    one = struct.pack("<f", 1.5)
    s = {}
    s["infer-f32-1x1"] = request(1, 2, infer(tensor(F32, [1, 1], one)))
    s["infer-f16-2x3-bf16-out"] = request(
        2, 2, infer(tensor(F16, [2, 3], b"\x00\x3c" * 6), 250, BF16))
    s["infer-unpacked-shape"] = request(
        3, 2, infer(tensor(F32, [1, 2], one * 2, packed=False)))
    s["infer-region-in-out"] = request(
        4, 2, infer(tensor(F32, [2, 4], region=region_ref(b"in0", 64, 32)),
                    out_region=region_ref(b"out:0", 0, 16)))
    # The finding: 1-column f32 data as a varint, a fixed32, a fixed64.
    bad = tensor(F32, [1, 1]) + key(3, 0) + b"\x80\x80\x80\x01"
    s["finding-data-varint"] = request(5, 2, infer(bad))
    s["data-fixed32"] = request(6, 2, infer(tensor(F32, [1, 1]) +
                                             f_fixed32(3, one)))
    s["data-fixed64"] = request(7, 2, infer(tensor(F32, [2, 1]) +
                                             f_fixed64(3, one * 2)))
    s["data-twice"] = request(8, 2, infer(tensor(F32, [1, 1], one) +
                                           f_bytes(3, one)))
    s["kind-twice"] = (request(9, 2, infer(tensor(F32, [1, 1], one))) +
                       f_bytes(3, b""))
    s["shape-9-dims"] = request(10, 2, infer(tensor(F32, [1] * 9, one)))
    s["register-region"] = request(11, 6, f_bytes(1, b"buf.0") +
                                   f_varint(2, 4096))
    s["unregister-region"] = request(12, 7, f_bytes(1, b"buf.0"))
    s["region-name-nul"] = request(13, 7, f_bytes(1, b"a\x00b"))
    s["region-name-64"] = request(14, 7, f_bytes(1, b"r" * 64))
    s["health"] = request(15, 3, b"")
    s["metrics"] = request(16, 4, b"")
    s["model-info"] = request(17, 5, b"")
    s["unknown-kind"] = request(18, 8, b"\x08\x01")
    s["id-only"] = f_varint(1, 19)
    s["unknown-nested"] = request(20, 2, infer(tensor(F32, [1, 1], one)) +
                                  f_varint(9, 1))
    s["region-wraps"] = request(
        21, 2, infer(tensor(F32, [1, 1], region=region_ref(
            b"r", (1 << 64) - 2, 4))))
    s["timeout-too-big"] = request(22, 2, infer(tensor(F32, [1, 1], one)) +
                                   f_varint(2, 1 << 40))
    s["group"] = f_varint(1, 23) + key(2, 3) + key(2, 4)
    s["data-and-region"] = request(24, 2, infer(tensor(
        F32, [1, 1], one, region=region_ref(b"r", 0, 4))))
    return s


def response(rid, status=0, message=b"", kind_tag=None, body=b""):
    m = f_varint(1, rid)
    if status:
        m += f_varint(2, status)
    if message:
        m += f_bytes(3, message)
    if kind_tag is not None:
        m += f_bytes(kind_tag, body)
    return m


def frame(body):
    return varint(len(body)) + body


BLOCKING = (1 << 63) | 1


def client_seeds():
    out4 = struct.pack("<4f", 1, 2, 3, 4)
    s = {}
    ok_infer = response(BLOCKING, kind_tag=4, body=f_bytes(
        1, tensor(F32, [1, 3], out4[:12])) + f_varint(2, 5) + f_varint(3, 7)
        + f_varint(4, 1) + f_bytes(5, b"cpu"))
    s["m0-infer-ok"] = b"\x00" + frame(ok_infer)
    s["m1-infer-bf16"] = b"\x01" + frame(response(BLOCKING, kind_tag=4, body=f_bytes(
        1, tensor(BF16, [2, 2], b"\x80\x3f" * 4))))
    s["m0-infer-error"] = b"\x00" + frame(response(
        BLOCKING, 3, b"input has 4 columns; the model takes 64"))
    s["m0-finding-data-varint"] = b"\x00" + frame(response(
        BLOCKING, kind_tag=4, body=f_bytes(
            1, tensor(F32, [1, 1]) + key(3, 0) + b"\x80\x80\x80\x01")))
    s["m2-pipelined"] = b"\x02" + frame(response(8, kind_tag=4, body=f_bytes(
        1, tensor(F32, [1, 1], out4[:4])))) + frame(response(
            7, 14, b"queue full"))
    s["m3-health"] = b"\x03" + frame(response(BLOCKING, kind_tag=5, body=(
        f_varint(1, 1) + f_varint(2, 1) + f_bytes(3, b"ready"))))
    s["m11-health-timeout"] = b"\x0b" + frame(response(
        BLOCKING, kind_tag=5, body=f_varint(1, 1) + f_bytes(3, b"loading")))
    s["m4-metrics"] = b"\x04" + frame(response(BLOCKING, kind_tag=6, body=f_bytes(
        1, b"# TYPE mlpd_up gauge\nmlpd_up 1\n")))
    layer = f_varint(1, 64) + f_varint(2, 10) + f_bytes(3, b"none")
    dev = f_bytes(1, b"cpu") + f_varint(2, 1) + f_varint(3, 9)
    s["m5-model-info"] = b"\x05" + frame(response(BLOCKING, kind_tag=7, body=(
        f_bytes(1, b"/m/digits.safetensors") + f_bytes(2, layer) +
        f_varint(3, 64) + f_varint(4, 10) + f_varint(5, 1) + f_varint(6, 1) +
        f_bytes(7, b"cpu") + f_bytes(8, b"cpu") + f_varint(9, 256) +
        f_varint(12, 1) + f_bytes(13, dev))))
    s["m6-health-then-infer"] = b"\x06" + frame(response(
        BLOCKING, kind_tag=5, body=f_varint(1, 1))) + frame(response(
            (1 << 63) | 2, kind_tag=4, body=f_bytes(
                1, tensor(F32, [1, 1], out4[:4]))))
    s["m7-too-big"] = b"\x07" + frame(response(BLOCKING, 3, b"x" * 100))
    s["m3-truncated"] = b"\x03" + frame(response(BLOCKING))[:-1]
    # The daemon hangs up before the request is sent: its last word.
    s["m16-hangup-last-word"] = b"\x10" + frame(response(
        0, 8, b"frame of 99999999 bytes exceeds the maximum frame size"))
    # Answers of 64 KiB and more: the library takes the receive buffer
    # over instead of copying them (alone, and with a small one after).
    big = (bytes(range(256)) * 266)[:68000]
    large = frame(response(BLOCKING, kind_tag=4, body=f_bytes(
        1, tensor(F32, [1, 17000], big))))
    s["m0-infer-large"] = b"\x00" + large
    s["m2-pipelined-large"] = b"\x02" + frame(response(8, kind_tag=4, body=f_bytes(
        1, tensor(F32, [1, 17000], big)))) + frame(response(7, kind_tag=4, body=f_bytes(
            1, tensor(F32, [1, 1], out4[:4]))))
    return s


def http_seeds():
    s = {}
    ctl = [b"\x13\x00\x00", b"\x07\x05\x01", b"\x0f\x01\x02", b"\x20\x00\x00"]
    reqs = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n",
        b"GET /readyz?verbose=1 HTTP/1.0\r\n\r\n",
        b"POST /readyz HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET http://[::1]:9/metrics HTTP/1.1\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"CONNECT host:80 HTTP/1.1\r\n\r\n",
        b"GET /" + b"a" * 1100 + b" HTTP/1.1\r\n\r\n",
        # Past the 8 KiB header bound (431); longer than CI's -max_len, so
        # only long runs see it whole.
        b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 8200 + b"\r\n\r\n",
    ]
    for i, r in enumerate(reqs):
        s["req%d" % i] = ctl[i % len(ctl)] + r
    return s


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes), in header order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    data = b""
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        data += b
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def st_seeds():
    s = {}
    s["linear-1to1"] = safetensors([("0.weight", "F32", [1, 1], f32(2)),
                                    ("0.bias", "F32", [1], f32(0.5))])
    s["mlp-2-3-1"] = safetensors(
        [("0.weight", "F32", [3, 2], f32(*range(6))),
         ("0.bias", "F32", [3], f32(1, 2, 3)),
         ("2.weight", "F32", [1, 3], f32(1, 1, 1)),
         ("2.bias", "F32", [1], f32(0))],
        {"mlpd.activations": "gelu_tanh,none"})
    s["layers-f16"] = safetensors(
        [("layers.1.bias", "F16", [2], b"\x00\x3c" * 2),
         ("layers.1.weight", "F16", [2, 2], b"\x00\x3c" * 4),
         ("layers.0.weight", "F16", [2, 1], b"\x00\x3c" * 2),
         ("layers.0.bias", "F16", [2], b"\x00\x00" * 2)])
    s["bf16-meta"] = safetensors(
        [("0.weight", "BF16", [1, 2], b"\x80\x3f" * 2),
         ("0.bias", "BF16", [1], b"\x80\x3f")],
        {"mlpd.activations": "gelu", "format": "pt"})
    s["overlap"] = safetensors([("0.weight", "F32", [1, 1], f32(2)),
                                ("0.bias", "F32", [1], f32(0.5))])[:-4]
    s["unsupported-dtype"] = safetensors([("0.weight", "F64", [1], b"\0" * 8)])
    s["empty-header"] = struct.pack("<Q", 2) + b"{}"
    return s


def rows_seeds():
    s = {}
    s["text"] = b"\x00" + b"1, 2, 3\n# comment\n\n4 5 6\r\n0x1p3,-inf,nan\n"
    s["text-ragged"] = b"\x00" + b"1,2\n3\n"
    s["st-inputs-labels"] = b"\x01" + safetensors(
        [("inputs", "F32", [2, 2], f32(1, 2, 3, 4)),
         ("labels", "F32", [2], f32(0, 7))])
    s["st-bf16-inputs"] = b"\x01" + safetensors(
        [("inputs", "BF16", [1, 3], b"\x80\x3f" * 3)])
    s["st-label-nan"] = b"\x01" + safetensors(
        [("inputs", "F32", [1, 1], f32(1)),
         ("labels", "F32", [1], f32(float("nan")))])
    return s


def frame_seeds():
    s = {}
    for v in [0, 1, 127, 128, 300, 4096, 4097, 1 << 26, (1 << 64) - 1]:
        s["len-%d" % v] = varint(v) + b"\x00" * 3
    s["overlong"] = b"\xff" * 11
    s["two-frames"] = frame(b"\x08\x01") + frame(b"")
    s["padded"] = b"\x81\x80\x80\x00"
    return s


def write(harness, seeds):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if old.startswith("seed-"):
            os.unlink(os.path.join(d, old))
    for name, data in sorted(seeds.items()):
        h = hashlib.sha1(data).hexdigest()[:8]
        path = os.path.join(d, "seed-%s-%s" % (name, h))
        with open(path, "wb") as f:
            f.write(data)


def main():
    write("fuzz_rpc", rpc_seeds())
    write("fuzz_client", client_seeds())
    write("fuzz_http", http_seeds())
    write("fuzz_safetensors", st_seeds())
    write("fuzz_rows", rows_seeds())
    write("fuzz_frame", frame_seeds())
    return 0


if __name__ == "__main__":
    sys.exit(main())

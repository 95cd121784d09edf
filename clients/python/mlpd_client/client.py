# SPDX-License-Identifier: Apache-2.0
"""Client for the mlpd daemon: proto/mlpd.proto over its Unix socket.

Frames are protobuf's delimited convention (varint length, then the
message). One Client is one connection, used by one thread at a time; it
supports blocking calls and pipelining (many requests in flight, answered in
any order, matched by id). asyncio: AsyncClient (aio.py). Not here:
reconnecting, retries.

Errors:
  * TransportError: no answer was obtained (connect failure, I/O error,
    timeout, the daemon hung up, a frame that does not decode). After one
    that desynchronises the stream (hang-up, I/O error, a timeout while a
    request was half sent, an oversized response) the client is unusable;
    close it and connect again.
  * FrameTooLarge: a request over the client's frame limit; nothing was
    sent and the client stays usable.
  * StatusError and one subclass per status (InvalidArgument, Unavailable,
    DeadlineExceeded, ResourceExhausted, PermissionDenied, Unimplemented,
    Internal, Cancelled): the daemon answered with a non-OK status.
    Blocking calls (infer, health, metrics, model_info, register_region,
    unregister_region) raise them. Pipelined recv() does not raise for a
    status: it returns an InferResult whose .status and .message say what
    happened (.raise_for_status() raises the same exception infer() would),
    so one refused request does not hide the answers behind it.
  * A connection the daemon refuses as a whole (peer not allowed,
    connection limits, a frame over its --max-frame, idle timeout) gets one
    answer with id 0 and is closed: the call that meets it raises that
    status's class (PermissionDenied, ResourceExhausted, ...) and the client
    is unusable from then on.

Shared memory: register_region() creates a sealed memfd, maps it here and
passes it to the daemon once; numpy arrays backed by it (Region.array) are
then sent as references to their bytes instead of the bytes, and an out=
array in a region receives the output in place. See Region.
"""

import array as _array
import errno as _errno
import fcntl
import mmap
import os
import select
import socket
import struct
import time

from . import mlpd_pb2 as pb

try:  # numpy is optional: lists of rows work without it
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None

DEFAULT_SOCKET = "/run/mlpd/mlpd.sock"
DEFAULT_MAX_FRAME = 64 << 20

F32, F16, BF16 = "f32", "f16", "bf16"

_DTYPE_NAMES = {
    "f32": pb.DTYPE_F32, "fp32": pb.DTYPE_F32, "float32": pb.DTYPE_F32,
    "f16": pb.DTYPE_F16, "fp16": pb.DTYPE_F16, "float16": pb.DTYPE_F16,
    "half": pb.DTYPE_F16,
    "bf16": pb.DTYPE_BF16, "bfloat16": pb.DTYPE_BF16,
}
_WIRE_NAME = {pb.DTYPE_F32: F32, pb.DTYPE_F16: F16, pb.DTYPE_BF16: BF16}
_ELEM_SIZE = {pb.DTYPE_F32: 4, pb.DTYPE_F16: 2, pb.DTYPE_BF16: 2}

# Blocking calls use ids with the top bit set, so that the late answer to a
# call that timed out is recognised and dropped rather than taken for the
# next call's.
_BLOCKING_BIT = 1 << 63
_SEND_BUFFER_MAX = 4 << 20  # as the C client library
_DRAIN = object()  # _next: wait only for abandoned answers


class MlpdError(Exception):
    """Base of every error this package raises."""


class TransportError(MlpdError):
    """No answer was obtained; see the module docstring. errno: the system
    error when there was one; timed_out: True when the client's timeout
    passed (a receive that timed out loses nothing)."""

    def __init__(self, message, errno=None, timed_out=False):
        super().__init__(message)
        self.errno = errno
        self.timed_out = timed_out


class FrameTooLarge(MlpdError):
    """A request over the client's frame limit; nothing was sent."""


class StatusError(MlpdError):
    """The daemon answered with a non-OK status."""

    status = None  # set on each subclass: the gRPC code
    retryable = False

    def __init__(self, message, id=None, result=None):
        super().__init__("%s: %s" % (status_name(self.status), message))
        self.message = message
        self.id = id
        self.result = result

    @property
    def status_name(self):
        return status_name(self.status)


class Cancelled(StatusError):
    status = pb.CANCELLED


class InvalidArgument(StatusError):
    status = pb.INVALID_ARGUMENT


class DeadlineExceeded(StatusError):
    status = pb.DEADLINE_EXCEEDED


class NotFound(StatusError):
    """No model of the name the request gave (the message names it)."""
    status = pb.NOT_FOUND


class ResourceExhausted(StatusError):
    status = pb.RESOURCE_EXHAUSTED


class PermissionDenied(StatusError):
    """The daemon does not let this peer connect (its --allow-uid /
    --allow-gid lists)."""
    status = pb.PERMISSION_DENIED


class Unimplemented(StatusError):
    status = pb.UNIMPLEMENTED


class Internal(StatusError):
    status = pb.INTERNAL


class Unavailable(StatusError):
    """Queue full, draining or still loading: try again later."""
    status = pb.UNAVAILABLE
    retryable = True


_STATUS_CLASSES = {c.status: c for c in (
    Cancelled, InvalidArgument, DeadlineExceeded, NotFound, ResourceExhausted,
    PermissionDenied, Unimplemented, Internal, Unavailable)}


def status_name(code):
    """'OK', 'INVALID_ARGUMENT', ... for a status number."""
    try:
        return pb.Status.Name(code)
    except ValueError:
        return "UNKNOWN(%d)" % code


def _status_error(code, message, id=None, result=None):
    cls = _STATUS_CLASSES.get(code)
    if cls is None:
        cls = type("Status%d" % code, (StatusError,), {"status": code})
    return cls(message or "(no message)", id=id, result=result)


def _wire_dtype(d):
    if d is None:
        return pb.DTYPE_UNSPECIFIED
    if isinstance(d, int):
        if d in _WIRE_NAME:
            return d
    elif isinstance(d, str) and d.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[d.lower()]
    raise ValueError("dtype %r is not one of f32, f16, bf16" % (d,))


# ---- tensors ----

def _f32_bits_to_bf16(bits):
    """Round float32 bit patterns to bfloat16, nearest even; NaN stays NaN."""
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return ((bits >> 16) | 0x40) & 0xFFFF
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _encode_rows(rows, dtype):
    """(bytes, nrows, ncols, wire dtype) for a numpy array or a list of
    rows. dtype None: float16 arrays go as F16, anything else as F32. A
    uint16 array with dtype BF16 holds bf16 bit patterns and goes as it
    is."""
    if _np is not None and isinstance(rows, _np.ndarray):
        a = rows
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise ValueError("rows must be 2-D [rows, cols], not shape %s"
                             % (a.shape,))
        if dtype is None:
            dtype = F16 if a.dtype == _np.float16 else F32
        wire = _wire_dtype(dtype)
        if wire == pb.DTYPE_BF16 and a.dtype == _np.uint16:
            # bf16 bit patterns already (numpy has no bfloat16; region
            # arrays of bf16 are uint16 too): sent as they are.
            data = _np.ascontiguousarray(a, dtype="<u2").tobytes()
        elif wire == pb.DTYPE_F32:
            data = _np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif wire == pb.DTYPE_F16:
            data = _np.ascontiguousarray(a, dtype="<f2").tobytes()
        else:
            u = _np.ascontiguousarray(a, dtype="<f4").view("<u4")
            u = u.astype(_np.uint64)
            nan = (u & 0x7FFFFFFF) > 0x7F800000
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            r[nan] = ((u[nan] >> 16) | 0x40).astype("<u2")
            data = r.tobytes()
        return data, a.shape[0], a.shape[1], wire
    rows = [list(r) for r in rows]
    if rows and not isinstance(rows[0], list):
        raise ValueError("rows must be a sequence of rows")
    ncols = len(rows[0]) if rows else 0
    for i, r in enumerate(rows):
        if len(r) != ncols:
            raise ValueError("row %d has %d values, row 0 has %d"
                             % (i, len(r), ncols))
    flat = [float(v) for r in rows for v in r]
    wire = _wire_dtype(dtype if dtype is not None else F32)
    n = len(flat)
    if wire == pb.DTYPE_F32:
        data = struct.pack("<%df" % n, *flat)
    elif wire == pb.DTYPE_F16:
        data = struct.pack("<%de" % n, *flat)
    else:
        bits = struct.unpack("<%dI" % n, struct.pack("<%df" % n, *flat))
        data = struct.pack("<%dH" % n,
                           *[_f32_bits_to_bf16(b) for b in bits])
    return data, len(rows), ncols, wire


def _decode(raw, wire, rows, cols):
    """Output bytes -> float32 numpy array [rows, cols], or a list of lists
    of floats without numpy."""
    n = rows * cols
    if _np is not None:
        if wire == pb.DTYPE_F32:
            a = _np.frombuffer(raw, dtype="<f4").astype(_np.float32)
        elif wire == pb.DTYPE_F16:
            a = _np.frombuffer(raw, dtype="<f2").astype(_np.float32)
        else:
            u = _np.frombuffer(raw, dtype="<u2").astype(_np.uint32) << 16
            a = u.view(_np.float32)
        return a.reshape(rows, cols)
    if wire == pb.DTYPE_F32:
        flat = struct.unpack("<%df" % n, raw)
    elif wire == pb.DTYPE_F16:
        flat = struct.unpack("<%de" % n, raw)
    else:
        h = struct.unpack("<%dH" % n, raw)
        flat = struct.unpack("<%df" % n,
                             struct.pack("<%dI" % n, *[x << 16 for x in h]))
    return [list(flat[i * cols:(i + 1) * cols]) for i in range(rows)]


class InferResult:
    """One inference answer.

    status/status_name/message: the daemon's verdict (status 0 = OK);
    ok: status == OK; id: the request's id; dtype: 'f32'/'f16'/'bf16' as
    sent by the daemon; shape: (rows, cols); raw: the output bytes as sent
    (None when the output went to a region); output: the output as a
    float32 numpy array [rows, cols] (a list of lists of floats when numpy
    is not installed), None unless ok; queue_us/compute_us: server-side
    time in the queue and in the engine; batch_rows: rows in the batch that
    computed it; device: the device that computed it.

    With out= (an array in a region): to_region is True, out is that
    array, already holding the output, and output is out itself for f32
    (float32 arrays), else a float32 copy of it.
    """

    __slots__ = ("id", "status", "message", "dtype", "shape", "raw",
                 "queue_us", "compute_us", "batch_rows", "device",
                 "to_region", "out", "_output")

    def __init__(self, resp, out=None):
        self.id = resp.id
        self.status = resp.status
        self.message = resp.message
        ir = resp.infer
        self.queue_us = ir.queue_us
        self.compute_us = ir.compute_us
        self.batch_rows = ir.batch_rows
        self.device = ir.device
        self.dtype = None
        self.shape = None
        self.raw = None
        self.to_region = False
        self.out = out
        self._output = None
        if resp.status != pb.OK:
            return
        if resp.WhichOneof("kind") != "infer" or not ir.HasField("output"):
            raise TransportError("response %d is OK but carries no output"
                                 % resp.id)
        t = ir.output
        if t.dtype not in _WIRE_NAME or len(t.shape) != 2 or \
                min(t.shape) < 0:
            raise TransportError("response %d: output is not a 2-D "
                                 "F32/F16/BF16 tensor" % resp.id)
        rows, cols = t.shape
        if not t.data and rows * cols > 0:
            # No bytes for a non-empty output: it went to the request's
            # output region (inline outputs are never empty).
            self.dtype = _WIRE_NAME[t.dtype]
            self.shape = (rows, cols)
            self.to_region = True
            return
        need = rows * cols * _ELEM_SIZE[t.dtype]
        if len(t.data) != need:
            raise TransportError("response %d: output [%d, %d] needs %d "
                                 "bytes but carries %d"
                                 % (resp.id, rows, cols, need, len(t.data)))
        self.dtype = _WIRE_NAME[t.dtype]
        self.shape = (rows, cols)
        self.raw = t.data

    @property
    def ok(self):
        return self.status == pb.OK

    @property
    def status_name(self):
        return status_name(self.status)

    @property
    def output(self):
        if self._output is not None:
            return self._output
        if self.to_region:
            if self.out is None:
                return None
            a = self.out if self.out.shape == self.shape else \
                self.out.reshape(self.shape)
            if self.dtype == F32:
                self._output = a
            elif self.dtype == F16:
                self._output = a.astype(_np.float32)
            else:
                self._output = (a.astype(_np.uint32) << 16).view(_np.float32)
            return self._output
        if self.raw is None:
            return None
        if self._output is None:
            self._output = _decode(self.raw, _DTYPE_NAMES[self.dtype],
                                   *self.shape)
        return self._output

    def raise_for_status(self):
        """Returns self when OK, else raises the StatusError subclass."""
        if self.status != pb.OK:
            raise _status_error(self.status, self.message, self.id, self)
        return self

    def __repr__(self):
        return "InferResult(id=%d, status=%s, shape=%s, dtype=%s)" % (
            self.id, self.status_name, self.shape, self.dtype)


class Health:
    __slots__ = ("live", "ready", "state")

    def __init__(self, live, ready, state):
        self.live, self.ready, self.state = live, ready, state

    def __repr__(self):
        return "Health(live=%s, ready=%s, state=%r)" % (
            self.live, self.ready, self.state)


class LayerInfo:
    __slots__ = ("in_features", "out_features", "activation")

    def __init__(self, m):
        self.in_features = m.in_features
        self.out_features = m.out_features
        self.activation = m.activation

    def __repr__(self):
        return "LayerInfo(%d -> %d, %s)" % (
            self.in_features, self.out_features, self.activation)


class DeviceInfo:
    """One device the daemon computes on: device (its name),
    in_rotation (False once it failed and was taken out), batches computed
    there, device_memory_bytes."""
    __slots__ = ("device", "in_rotation", "batches", "device_memory_bytes")

    def __init__(self, m):
        self.device = m.device
        self.in_rotation = m.in_rotation
        self.batches = m.batches
        self.device_memory_bytes = m.device_memory_bytes

    def __repr__(self):
        return "DeviceInfo(%r, in_rotation=%s, batches=%d)" % (
            self.device, self.in_rotation, self.batches)


class ModelInfo:
    """What the daemon serves: path, layers (LayerInfo list), in_features,
    out_features, file_dtype/compute_dtype ('f32'/'f16'/'bf16' or None),
    engine ('cpu'/'cuda'), device, max_batch, device_memory_bytes,
    host_memory_bytes, generation (1 at start, +1 per reload), devices
    (DeviceInfo list, every device; device is the first)."""

    def __init__(self, m):
        self.path = m.path
        self.layers = [LayerInfo(x) for x in m.layers]
        self.in_features = m.in_features
        self.out_features = m.out_features
        self.file_dtype = _WIRE_NAME.get(m.file_dtype)
        self.compute_dtype = _WIRE_NAME.get(m.compute_dtype)
        self.engine = m.engine
        self.device = m.device
        self.max_batch = m.max_batch
        self.device_memory_bytes = m.device_memory_bytes
        self.host_memory_bytes = m.host_memory_bytes
        self.generation = m.generation
        self.devices = [DeviceInfo(d) for d in m.devices]

    def __repr__(self):
        return "ModelInfo(%r, %s, %s on %s)" % (
            self.path, " -> ".join(
                [str(self.in_features)] +
                ["%d" % l.out_features for l in self.layers]),
            self.engine, self.device)


class ModelStatus:
    """One model as ListModels reports it."""

    def __init__(self, m):
        self.name = m.name
        self.versions = list(m.versions)
        self.state = m.state
        self.ready = m.ready
        self.message = m.message

    def __repr__(self):
        return "ModelStatus(%r, %s%s)" % (
            self.name, self.state, ", " + self.message if self.message else "")


# ---- shared memory ----

_F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
# numpy dtypes of region arrays, by wire dtype; bf16 has no numpy type, so
# its arrays hold the raw 16-bit patterns as uint16.
_REGION_NP = {pb.DTYPE_F32: "<f4", pb.DTYPE_F16: "<f2", pb.DTYPE_BF16: "<u2"}


def _need_numpy(what):
    if _np is None:
        raise MlpdError("%s needs numpy" % what)
    return _np


class Region:
    """A shared-memory region registered on one Client (register_region).

    A sealed memfd mapped read-write in this process (read-only when it was
    sealed against writes: then it can only hold inputs). array() returns
    numpy arrays backed by the mapping: fill one with input rows and pass it
    (or a row slice of it) to Client.infer/send, and only a reference to
    its bytes goes over the socket; pass an array in a region as out= and
    the daemon writes the output there.

    The rules of the daemon: a window (an array's bytes) must lie inside the
    region; do not write an input array, or read an out= array, while a
    request using it is in flight (the daemon reads inputs until it answers
    and writes outputs before it does).

    name, size, fd (the memfd, owned by the region), writable, buffer (a
    memoryview of the whole mapping). Use it as a context manager, or call
    close(): that unregisters it (when its client can still say so) and
    unmaps it once no array views it any more.
    """

    def __init__(self, client, name, fd, size):
        self.name = name
        self.size = size
        self.fd = fd
        self._client = client
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        self.writable = not seals & (fcntl.F_SEAL_WRITE | _F_SEAL_FUTURE_WRITE)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        try:
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except PermissionError:  # a descriptor opened read-only
            self.writable = False
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        self._addr = None

    @property
    def buffer(self):
        """The whole mapping as a memoryview (no numpy needed)."""
        return memoryview(self._mm)

    def _address(self):
        if self._addr is None:
            np = _need_numpy("locating region arrays")
            self._addr = np.frombuffer(self._mm, dtype=np.uint8,
                                       count=1).__array_interface__["data"][0]
        return self._addr

    def array(self, dtype, shape, offset=0):
        """A numpy array of dtype ('f32', 'f16', 'bf16' or their aliases;
        bf16 arrays are uint16 holding the bit patterns) and shape (an int
        or a tuple), viewing the region's bytes from offset."""
        np = _need_numpy("Region.array")
        if self._mm is None:
            raise MlpdError("region %r is closed" % self.name)
        dt = np.dtype(_REGION_NP[_wire_dtype(dtype)])
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for n in shape:
            count *= n
        if offset < 0 or count < 0 or offset + count * dt.itemsize > self.size:
            raise ValueError("%d elements of %s from offset %d do not fit "
                             "region %r of %d bytes"
                             % (count, dtype, offset, self.name, self.size))
        return np.frombuffer(self._mm, dtype=dt, count=count,
                             offset=offset).reshape(shape)

    def unregister(self):
        """Unregisters it on its client (the daemon unmaps its side once the
        requests using it are answered); the mapping here stays."""
        if self._client is None:
            raise MlpdError("region %r is not registered" % self.name)
        self._client.unregister_region(self.name)

    def close(self):
        c = self._client
        if c is not None:
            if c._sock is not None and c._broken is None and not c.inflight:
                try:
                    c.unregister_region(self.name)
                except MlpdError:
                    pass
            self._client = None
            c._regions.pop(self.name, None)
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # arrays still view it: it goes with the last of them
            self._mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Region(%r, %d bytes%s)" % (
            self.name, self.size, "" if self.writable else ", read-only")


MODEL_NAME_MAX = 127  # bytes of UTF-8 (proto/mlpd.options)


def _set_model(ir, model):
    """InferRequest.model; left unset when empty, so that a daemon from
    before the field existed (which refuses fields it does not know inside
    a request) still serves the request."""
    if not model:
        return
    if not isinstance(model, str):
        raise TypeError("model must be a str, not %s" % type(model).__name__)
    if len(model.encode("utf-8")) > MODEL_NAME_MAX:
        raise ValueError("model name over %d bytes" % MODEL_NAME_MAX)
    ir.model = model


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _grow_send_buffer(sock, have, n):
    """Lets a frame of n bytes, larger than the socket's send buffer, go out
    in one write (one wake-up of the daemon, not several), up to 4 MiB;
    small frames keep the kernel's default, so that requests do not queue
    where the daemon cannot see them. The kernel caps it at
    net.core.wmem_max. have: the size as last asked (None: not looked at
    yet); returns the new one."""
    if have is None:
        have = max(1, sock.getsockopt(socket.SOL_SOCKET,
                                      socket.SO_SNDBUF) // 2)
    if n <= have or have >= _SEND_BUFFER_MAX:
        return have
    want = min(n, _SEND_BUFFER_MAX)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)
    except OSError:
        pass  # a smaller buffer only costs more writes
    return want


class Client:
    """One connection to mlpd.

    Client(socket_path=None, timeout=None, max_frame=64 MiB, spin_us=0):
    socket_path defaults to $MLPD_SOCKET, else /run/mlpd/mlpd.sock;
    timeout (seconds, None = forever) bounds each call's waiting on the
    socket; max_frame bounds the requests sent and the responses accepted;
    spin_us (also an attribute) makes a call that waits for an answer poll
    the socket that long before it sleeps, within its timeout: the
    low-latency mode of mlpd_client_set_spin, for a thread that has a core
    to spare. Use it as a context manager, or call close().
    """

    def __init__(self, socket_path=None, timeout=None,
                 max_frame=DEFAULT_MAX_FRAME, spin_us=0):
        self.path = (socket_path or os.environ.get("MLPD_SOCKET")
                     or DEFAULT_SOCKET)
        self.timeout = timeout
        self.max_frame = max_frame
        self.spin_us = spin_us
        self._sndbuf = None  # SO_SNDBUF as asked (half what the kernel says)
        self._buf = bytearray()
        self._inflight = 0
        self._abandoned = 0
        self._next_id = 1
        self._broken = None
        self._regions = {}  # name -> Region registered on this connection
        self._outs = {}     # pipelined id -> its out= array
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(self.path)
        except OSError as e:
            self._sock.close()
            hint = ""
            if isinstance(e, FileNotFoundError):
                hint = " (is mlpd running, and is this its --socket path?)"
            elif isinstance(e, ConnectionRefusedError):
                hint = " (the socket file exists but no daemon listens on it)"
            raise TransportError("connect to %s: %s%s"
                                 % (self.path, e.strerror or e, hint),
                                 errno=e.errno) from e
        # All waiting is done with poll() against the call's deadline.
        self._sock.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self._sock.fileno())

    def close(self):
        """Closes the connection; the daemon unmaps its regions. Region
        objects stay mapped here until closed."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for r in self._regions.values():
            r._client = None
        self._regions.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def fileno(self):
        return self._sock.fileno()

    @property
    def inflight(self):
        """Pipelined requests sent and not yet received."""
        return self._inflight - self._abandoned

    # ---- low level ----

    def _check(self):
        if self._sock is None:
            raise TransportError("client is closed")
        if self._broken is not None:
            raise TransportError("connection to %s is unusable since an "
                                 "earlier error (connect again): %s"
                                 % (self.path, self._broken))

    def _break(self, message, errno=None):
        if self._broken is None:
            self._broken = message
        return TransportError(message, errno=errno)

    def _deadline(self):
        return None if self.timeout is None else \
            time.monotonic() + self.timeout

    def _wait(self, events, deadline):
        """poll() until one of events or the deadline; returns revents (0 on
        timeout). Waiting for an answer, it first polls without sleeping
        for spin_us."""
        self._poll.modify(self._sock.fileno(), events)
        if self.spin_us > 0 and events == select.POLLIN:
            until = time.monotonic() + self.spin_us * 1e-6
            if deadline is not None and deadline < until:
                until = deadline
            while True:
                ev = self._poll.poll(0)
                if ev:
                    return ev[0][1]
                if time.monotonic() >= until:
                    break
        while True:
            if deadline is None:
                ms = None
            else:
                ms = max(0, int((deadline - time.monotonic()) * 1000 + 0.999))
            ev = self._poll.poll(ms)
            if ev:
                return ev[0][1]
            if deadline is not None and time.monotonic() >= deadline:
                return 0

    def _read_some(self, eof_ok=False):
        """Reads what the socket has; False when nothing was there, None at
        the end of the stream when eof_ok."""
        try:
            data = self._sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return False
        except ConnectionResetError:
            data = b""
        except OSError as e:
            raise self._break("read from %s: %s" % (self.path, e), e.errno)
        if not data and eof_ok:
            return None
        if not data:
            if self._buf:
                raise self._break("daemon at %s closed the connection in the "
                                  "middle of a response" % self.path)
            raise self._break("daemon at %s closed the connection with %d "
                              "request(s) unanswered"
                              % (self.path, self.inflight))
        self._buf += data
        return True

    def _frame(self):
        """(header length, body length) of a complete buffered frame, or
        None."""
        n = shift = 0
        for i, b in enumerate(self._buf[:10]):
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                if n > self.max_frame:
                    raise self._break(
                        "response frame of %d bytes exceeds the client's "
                        "limit of %d bytes" % (n, self.max_frame))
                if len(self._buf) - i - 1 >= n:
                    return i + 1, n
                return None
        if len(self._buf) >= 10:
            raise self._break("response length prefix is not a valid varint")
        return None

    def _send(self, msg, deadline, fd=None):
        """Writes msg as a frame; fd (if any) is passed with its first
        bytes (SCM_RIGHTS), which is how the daemon pairs it with the
        frame."""
        body = msg.SerializeToString()
        if len(body) > self.max_frame:
            raise FrameTooLarge(
                "request of %d bytes exceeds the frame limit of %d bytes; "
                "send fewer rows per request (or raise the limit on both "
                "sides: mlpd --max-frame, Client(max_frame=...))"
                % (len(body), self.max_frame))
        data = memoryview(_varint(len(body)) + body)
        self._sndbuf = _grow_send_buffer(self._sock, self._sndbuf, len(data))
        off = 0
        while off < len(data):
            try:
                if fd is not None and off == 0:
                    off += self._sock.sendmsg(
                        [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                  _array.array("i", [fd]))])
                else:
                    off += self._sock.send(data[off:])
                continue
            except (BlockingIOError, InterruptedError):
                pass
            except (BrokenPipeError, ConnectionResetError) as e:
                raise self._closed_while_sending(off, len(data), e.errno)
            except OSError as e:
                raise self._break("write to %s: %s" % (self.path, e),
                                  e.errno)
            # Full: wait for room, taking in answers meanwhile so that a
            # daemon applying backpressure is never waited on forever.
            ev = self._wait(select.POLLOUT | select.POLLIN, deadline)
            if ev == 0:
                msg = ("timed out after %s s sending a request to %s (%d of "
                       "%d bytes sent)" % (self.timeout, self.path, off,
                                           len(data)))
                if off == 0:
                    raise TransportError(msg, timed_out=True)
                self._break(msg)
                raise TransportError(msg, timed_out=True)
            if ev & select.POLLIN and not ev & select.POLLOUT:
                if self._read_some(eof_ok=True) is None:
                    raise self._closed_while_sending(off, len(data),
                                                    _errno.EPIPE)

    def _closed_while_sending(self, off, total, errno):
        why, refusal = self._last_word()
        e = self._break(
            "daemon at %s closed the connection while a request was being "
            "sent (%d of %d bytes sent)%s"
            % (self.path, off, total, why), errno)
        if refusal is not None:
            # It said why it hung up (a refused peer, a limit): that is the
            # error, as when its answer is read in full.
            return _status_error(refusal.status, "daemon at %s refused the "
                                 "connection: %s" % (self.path,
                                                     refusal.message))
        return e

    def _last_word(self):
        """After the daemon hung up on a request being sent: its reason, if
        it sent one first (RESOURCE_EXHAUSTED for a frame over its
        --max-frame): (text, the Response when it was the connection's
        refusal, id 0, else None)."""
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except OSError:
                break
            if not data:
                break
            self._buf += data
        try:
            f = self._frame()
        except TransportError:
            f = None
        if f is None:
            return "", None
        r = pb.Response()
        try:
            r.ParseFromString(bytes(self._buf[f[0]:f[0] + f[1]]))
        except Exception:  # the daemon's last words are best effort
            return "", None
        if r.status == pb.OK:
            return "", None
        return ("; it answered %s: %s" % (status_name(r.status), r.message),
                r if r.id == 0 else None)

    def _next(self, deadline, expect=None):
        """The next response off the stream (late answers to abandoned
        blocking calls are dropped)."""
        while True:
            f = self._frame()
            while f is None:
                if not self._read_some():
                    if self._wait(select.POLLIN, deadline) == 0:
                        raise TransportError(
                            "no response from %s within %s s"
                            % (self.path, self.timeout), timed_out=True)
                f = self._frame()
            h, n = f
            body = bytes(self._buf[h:h + n])
            del self._buf[:h + n]
            if self._inflight > 0:
                self._inflight -= 1
            r = pb.Response()
            try:
                r.ParseFromString(body)
            except Exception as e:
                raise TransportError("response of %d bytes does not decode: "
                                     "%s" % (n, e))
            if r.id & _BLOCKING_BIT and self._abandoned > 0 and \
                    r.id != expect:
                self._abandoned -= 1
                if expect is _DRAIN and self._abandoned == 0:
                    return None
                continue
            return r

    def _roundtrip(self, msg, fd=None):
        self._check()
        if self.inflight:
            raise MlpdError("%d pipelined request(s) still in flight; "
                            "recv() them first" % self.inflight)
        deadline = self._deadline()
        # The protocol's rule for descriptors: a RegisterRegion is the only
        # unanswered frame on its connection when it is sent, so the late
        # answers of abandoned calls are waited for first.
        while fd is not None and self._abandoned > 0:
            r = self._next(deadline, expect=_DRAIN)
            if r is not None and r.id == 0 and r.status != pb.OK:
                raise MlpdError("daemon at %s refused the connection: %s"
                                % (self.path, r.message))
        msg.id = _BLOCKING_BIT | self._next_id
        self._next_id += 1
        self._send(msg, deadline, fd)
        self._inflight += 1
        try:
            r = self._next(deadline, expect=msg.id)
        except TransportError as e:
            if e.timed_out:  # its answer may still come: drop it then
                self._abandoned += 1
            raise
        if r.id == 0 and r.status != pb.OK:
            # Not this call's answer but the connection's: the daemon
            # refused it (peer not allowed, a limit, a timeout) and closes.
            text = "daemon at %s refused the connection: %s" % (self.path,
                                                                r.message)
            self._break("%s: %s" % (status_name(r.status), text))
            raise _status_error(r.status, text)
        if r.id != msg.id:
            raise self._break("daemon answered id %d to request id %d"
                              % (r.id, msg.id))
        return r

    def _simple(self, kind, name=None):
        req = pb.Request()
        getattr(req, kind).SetInParent()
        if name:
            getattr(req, kind).name = name
        r = self._roundtrip(req)
        if r.status != pb.OK:
            raise _status_error(r.status, r.message, r.id)
        if r.WhichOneof("kind") != kind:
            raise TransportError("%s: the daemon's answer is of another kind"
                                 % kind)
        return getattr(r, kind)

    # ---- API ----

    def health(self):
        """Health(live, ready, state)."""
        h = self._simple("health")
        return Health(h.live, h.ready, h.state)

    def ready(self):
        return self.health().ready

    def metrics(self):
        """The Prometheus text exposition."""
        return self._simple("metrics").text

    def model_info(self, name=None):
        """ModelInfo of the model called name (None: the only or default
        one)."""
        return ModelInfo(self._simple("model_info", name))

    def list_models(self):
        """Every model the daemon knows: ModelStatus list (name, versions,
        state: 'loading', 'ready', 'unloading', 'unloaded' or 'failed',
        ready, message)."""
        return [ModelStatus(m) for m in self._simple("list_models").models]

    def load_model(self, name):
        """Asks the daemon to load (or reload) model name; only root and
        the daemon's own user may (PermissionDenied). Returns once the load
        started; list_models tells when it is ready."""
        return ModelStatus(self._simple("load_model", name).model)

    def unload_model(self, name):
        """Asks the daemon to unload model name (what it accepted is still
        answered); as load_model."""
        return ModelStatus(self._simple("unload_model", name).model)

    def register_region(self, name, size, fd=None):
        """Creates a shared-memory region of size bytes and registers it on
        this connection as name (1..63 characters of A-Z a-z 0-9 . _ - : /,
        unique on the connection); returns its Region.

        The region is a memfd (MFD_ALLOW_SEALING), sealed against shrinking
        and growing, mapped here and passed once to the daemon with
        SCM_RIGHTS. With fd, the caller's own memfd is registered instead
        (it must be sealed with F_SEAL_SHRINK and hold at least size bytes;
        the Region works on a duplicate, the caller keeps fd). Raises
        InvalidArgument (a refused descriptor, a duplicate name, ...),
        ResourceExhausted (the daemon's --max-regions or --max-shm-bytes),
        or another StatusError / TransportError.
        """
        if not isinstance(name, str) or not 1 <= len(name.encode()) <= 63:
            raise ValueError("region name must be 1..63 bytes")
        if size < 1:
            raise ValueError("region size must be >= 1 byte")
        if fd is None:
            fd = os.memfd_create("mlpd-region:" + name,
                                 os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                # The daemon requires F_SEAL_SHRINK (a shrinking file
                # would SIGBUS its mapping); F_SEAL_GROW keeps the size
                # what both sides think it is. Writes stay allowed.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                            fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            except OSError:
                os.close(fd)
                raise
        else:
            fd = os.dup(fd)
        try:
            req = pb.Request()
            req.register_region.name = name
            req.register_region.size = size
            r = self._roundtrip(req, fd=fd)
            if r.status != pb.OK:
                raise _status_error(r.status, r.message, r.id)
            try:
                region = Region(self, name, fd, size)
            except OSError:
                self.unregister_region(name)
                raise
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = region
        return region

    def unregister_region(self, name):
        """Unregisters name on this connection: the name is free at once,
        and the daemon unmaps the region once the requests using it are
        answered. Raises InvalidArgument for a name not registered."""
        req = pb.Request()
        req.unregister_region.name = name
        r = self._roundtrip(req)
        if r.status != pb.OK:
            raise _status_error(r.status, r.message, r.id)
        region = self._regions.pop(name, None)
        if region is not None:
            region._client = None

    def _in_region(self, a):
        """(region, offset) when numpy array a lies in a region registered
        on this connection, else None."""
        if _np is None or not self._regions or \
                not isinstance(a, _np.ndarray):
            return None
        ptr = a.__array_interface__["data"][0]
        for region in self._regions.values():
            base = region._address()
            if base <= ptr < base + region.size:
                if ptr + a.nbytes > base + region.size:
                    raise ValueError("array runs past the end of region %r"
                                     % region.name)
                return region, ptr - base
        return None

    def _infer_request(self, rows, dtype, output_dtype, timeout_ms,
                       out=None, model=None):
        req = pb.Request()
        ir = req.infer
        _set_model(ir, model)
        where = self._in_region(rows)
        if where is not None and rows.flags.c_contiguous:
            # Sent as a reference to its bytes, which are sent as they are.
            a = rows if rows.ndim == 2 else rows.reshape(1, -1)
            have = {_np.dtype("<f4"): pb.DTYPE_F32,
                    _np.dtype("<f2"): pb.DTYPE_F16,
                    _np.dtype("<u2"): pb.DTYPE_BF16}.get(a.dtype)
            if have is None or a.ndim != 2:
                raise ValueError("a region array must be 2-D float32, "
                                 "float16 or uint16 (bf16), not %s %s"
                                 % (a.dtype, a.shape))
            if have == pb.DTYPE_BF16 and _wire_dtype(dtype) != pb.DTYPE_BF16:
                raise ValueError("a uint16 region array holds bf16: pass "
                                 "dtype='bf16'")
            if dtype is not None and _wire_dtype(dtype) != have:
                raise ValueError("a region array is sent as it is: it holds "
                                 "%s, not %s" % (_WIRE_NAME[have], dtype))
            ir.input.dtype = have
            ir.input.shape.extend(a.shape)
            ir.input.region.region = where[0].name
            ir.input.region.offset = where[1]
            ir.input.region.length = a.nbytes
            nrows = a.shape[0]
        else:
            data, nrows, ncols, wire = _encode_rows(rows, dtype)
            ir.input.dtype = wire
            ir.input.shape.extend([nrows, ncols])
            ir.input.data = data
        ir.timeout_ms = int(timeout_ms or 0)
        ir.output_dtype = _wire_dtype(output_dtype)
        if out is not None:
            where = self._in_region(out)
            if where is None or not out.flags.c_contiguous:
                raise ValueError("out= must be a contiguous array in a "
                                 "region registered on this client")
            odt = {_np.dtype("<f4"): pb.DTYPE_F32,
                   _np.dtype("<f2"): pb.DTYPE_F16,
                   _np.dtype("<u2"): pb.DTYPE_BF16}.get(out.dtype)
            if odt is None:
                raise ValueError("out= must be float32, float16 or uint16 "
                                 "(bf16), not %s" % out.dtype)
            if output_dtype is not None and _wire_dtype(output_dtype) != odt:
                raise ValueError("out= holds %s, not output_dtype %s"
                                 % (_WIRE_NAME[odt], output_dtype))
            if out.ndim not in (1, 2) or (out.ndim == 2 and
                                          out.shape[0] != nrows) or \
                    (out.ndim == 1 and nrows != 1):
                raise ValueError("out= has shape %s; it needs [%d, "
                                 "out_features]" % (out.shape, nrows))
            ir.output_dtype = odt
            ir.output_region.region = where[0].name
            ir.output_region.offset = where[1]
            ir.output_region.length = out.nbytes
        return req

    def infer(self, rows, dtype=None, output_dtype=None, timeout_ms=0,
              out=None, model=None):
        """Runs the model on rows and waits for the answer.

        model: the name of the model to run, for a daemon serving several
        (None or "": the only or default one).
        rows: a 2-D numpy array (or 1-D for one row) or a list of rows.
        dtype: wire dtype of the input, 'f32' (default; float16 arrays
        default to 'f16'), 'f16' or 'bf16'. output_dtype: the same choices,
        None = as the input. timeout_ms: server-side deadline while queued,
        0 = none. Returns an InferResult; raises a StatusError subclass
        when the daemon refuses (InvalidArgument, Unavailable, ...), and
        TransportError when no answer came.

        Shared memory: rows that are a contiguous array in a region
        registered on this client (Region.array, or a row slice of one)
        are sent as a reference, in their own dtype (uint16 arrays as bf16:
        say dtype='bf16'). out: an array in such a region, [rows,
        out_features] of float32, float16 or uint16 (bf16), that receives
        the output in place (its dtype is the output dtype); the result's
        to_region is then True and its output views out.
        """
        r = self._roundtrip(self._infer_request(rows, dtype, output_dtype,
                                                timeout_ms, out, model))
        return InferResult(r, out).raise_for_status()

    def send(self, rows, id, dtype=None, output_dtype=None, timeout_ms=0,
             out=None, model=None):
        """Pipelining: sends an infer request tagged with id (an integer
        below 2**63, unique among requests in flight) without waiting.
        Collect answers with recv(). rows, out and model as for infer()."""
        self._check()
        if not 0 <= id < _BLOCKING_BIT:
            raise ValueError("id must be in [0, 2**63)")
        req = self._infer_request(rows, dtype, output_dtype, timeout_ms, out,
                                  model)
        req.id = id
        self._send(req, self._deadline())
        self._inflight += 1
        if out is not None:
            self._outs[id] = out

    def recv(self):
        """The next answer to a pipelined request, in arrival order (any
        id). Returns an InferResult whatever its status: check .ok or call
        .raise_for_status(). A timeout raises TransportError and loses
        nothing: call again."""
        self._check()
        if self.inflight == 0:
            raise MlpdError("recv(): no request in flight")
        r = self._next(self._deadline())
        return InferResult(r, self._outs.pop(r.id, None))

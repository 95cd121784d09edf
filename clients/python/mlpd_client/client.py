"""Client for the mlpd daemon: proto/mlpd.proto over its Unix socket.

Frames are protobuf's delimited convention (varint length, then the
message). One Client is one connection, used by one thread at a time; it
supports blocking calls and pipelining (many requests in flight, answered in
any order, matched by id). Not here: reconnecting, retries, asyncio.

Errors:
  * TransportError: no answer was obtained (connect failure, I/O error,
    timeout, the daemon hung up, a frame that does not decode). After one
    that desynchronises the stream (hang-up, I/O error, a timeout while a
    request was half sent, an oversized response) the client is unusable;
    close it and connect again.
  * FrameTooLarge: a request over the client's frame limit; nothing was
    sent and the client stays usable.
  * StatusError and one subclass per status (InvalidArgument, Unavailable,
    DeadlineExceeded, ResourceExhausted, Unimplemented, Internal,
    Cancelled): the daemon answered with a non-OK status. Blocking calls
    (infer, health, metrics, model_info) raise them. Pipelined recv() does
    not raise for a status: it returns an InferResult whose .status and
    .message say what happened (.raise_for_status() raises the same
    exception infer() would), so one refused request does not hide the
    answers behind it.
"""

import errno as _errno
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


class ResourceExhausted(StatusError):
    status = pb.RESOURCE_EXHAUSTED


class Unimplemented(StatusError):
    status = pb.UNIMPLEMENTED


class Internal(StatusError):
    status = pb.INTERNAL


class Unavailable(StatusError):
    """Queue full, draining or still loading: try again later."""
    status = pb.UNAVAILABLE
    retryable = True


_STATUS_CLASSES = {c.status: c for c in (
    Cancelled, InvalidArgument, DeadlineExceeded, ResourceExhausted,
    Unimplemented, Internal, Unavailable)}


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
    rows. dtype None: float16 arrays go as F16, anything else as F32."""
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
        if wire == pb.DTYPE_F32:
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
    sent by the daemon; shape: (rows, cols); raw: the output bytes as sent;
    output: the output as a float32 numpy array [rows, cols] (a list of
    lists of floats when numpy is not installed), None unless ok;
    queue_us/compute_us: server-side time in the queue and in the engine;
    batch_rows: rows in the batch that computed it.
    """

    __slots__ = ("id", "status", "message", "dtype", "shape", "raw",
                 "queue_us", "compute_us", "batch_rows", "_output")

    def __init__(self, resp):
        self.id = resp.id
        self.status = resp.status
        self.message = resp.message
        ir = resp.infer
        self.queue_us = ir.queue_us
        self.compute_us = ir.compute_us
        self.batch_rows = ir.batch_rows
        self.dtype = None
        self.shape = None
        self.raw = None
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


class ModelInfo:
    """What the daemon serves: path, layers (LayerInfo list), in_features,
    out_features, file_dtype/compute_dtype ('f32'/'f16'/'bf16' or None),
    engine ('cpu'/'cuda'), device, max_batch, device_memory_bytes,
    host_memory_bytes, generation (1 at start, +1 per reload)."""

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

    def __repr__(self):
        return "ModelInfo(%r, %s, %s on %s)" % (
            self.path, " -> ".join(
                [str(self.in_features)] +
                ["%d" % l.out_features for l in self.layers]),
            self.engine, self.device)


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


class Client:
    """One connection to mlpd.

    Client(socket_path=None, timeout=None, max_frame=64 MiB):
    socket_path defaults to $MLPD_SOCKET, else /run/mlpd/mlpd.sock;
    timeout (seconds, None = forever) bounds each call's waiting on the
    socket; max_frame bounds the requests sent and the responses accepted.
    Use it as a context manager, or call close().
    """

    def __init__(self, socket_path=None, timeout=None,
                 max_frame=DEFAULT_MAX_FRAME):
        self.path = (socket_path or os.environ.get("MLPD_SOCKET")
                     or DEFAULT_SOCKET)
        self.timeout = timeout
        self.max_frame = max_frame
        self._buf = bytearray()
        self._inflight = 0
        self._abandoned = 0
        self._next_id = 1
        self._broken = None
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
        if self._sock is not None:
            self._sock.close()
            self._sock = None

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
        timeout)."""
        self._poll.modify(self._sock.fileno(), events)
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

    def _send(self, msg, deadline):
        body = msg.SerializeToString()
        if len(body) > self.max_frame:
            raise FrameTooLarge(
                "request of %d bytes exceeds the frame limit of %d bytes; "
                "send fewer rows per request (or raise the limit on both "
                "sides: mlpd --max-frame, Client(max_frame=...))"
                % (len(body), self.max_frame))
        data = memoryview(_varint(len(body)) + body)
        off = 0
        while off < len(data):
            try:
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
        return self._break(
            "daemon at %s closed the connection while a request was being "
            "sent (%d of %d bytes sent)%s"
            % (self.path, off, total, self._last_word()), errno)

    def _last_word(self):
        """After the daemon hung up on a request being sent: its reason, if
        it sent one first (RESOURCE_EXHAUSTED for a frame over its
        --max-frame)."""
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
            return ""
        r = pb.Response()
        try:
            r.ParseFromString(bytes(self._buf[f[0]:f[0] + f[1]]))
        except Exception:  # the daemon's last words are best effort
            return ""
        if r.status == pb.OK:
            return ""
        return "; it answered %s: %s" % (status_name(r.status), r.message)

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
                continue
            return r

    def _roundtrip(self, msg):
        self._check()
        if self.inflight:
            raise MlpdError("%d pipelined request(s) still in flight; "
                            "recv() them first" % self.inflight)
        deadline = self._deadline()
        msg.id = _BLOCKING_BIT | self._next_id
        self._next_id += 1
        self._send(msg, deadline)
        self._inflight += 1
        try:
            r = self._next(deadline, expect=msg.id)
        except TransportError as e:
            if e.timed_out:  # its answer may still come: drop it then
                self._abandoned += 1
            raise
        if r.id != msg.id:
            raise self._break("daemon answered id %d to request id %d"
                              % (r.id, msg.id))
        return r

    def _simple(self, kind):
        req = pb.Request()
        getattr(req, kind).SetInParent()
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

    def model_info(self):
        return ModelInfo(self._simple("model_info"))

    def _infer_request(self, rows, dtype, output_dtype, timeout_ms):
        data, nrows, ncols, wire = _encode_rows(rows, dtype)
        req = pb.Request()
        ir = req.infer
        ir.input.dtype = wire
        ir.input.shape.extend([nrows, ncols])
        ir.input.data = data
        ir.timeout_ms = int(timeout_ms or 0)
        ir.output_dtype = _wire_dtype(output_dtype)
        return req

    def infer(self, rows, dtype=None, output_dtype=None, timeout_ms=0):
        """Runs the model on rows and waits for the answer.

        rows: a 2-D numpy array (or 1-D for one row) or a list of rows.
        dtype: wire dtype of the input, 'f32' (default; float16 arrays
        default to 'f16'), 'f16' or 'bf16'. output_dtype: the same choices,
        None = as the input. timeout_ms: server-side deadline while queued,
        0 = none. Returns an InferResult; raises a StatusError subclass
        when the daemon refuses (InvalidArgument, Unavailable, ...), and
        TransportError when no answer came.
        """
        r = self._roundtrip(self._infer_request(rows, dtype, output_dtype,
                                                timeout_ms))
        return InferResult(r).raise_for_status()

    def send(self, rows, id, dtype=None, output_dtype=None, timeout_ms=0):
        """Pipelining: sends an infer request tagged with id (an integer
        below 2**63, unique among requests in flight) without waiting.
        Collect answers with recv()."""
        self._check()
        if not 0 <= id < _BLOCKING_BIT:
            raise ValueError("id must be in [0, 2**63)")
        req = self._infer_request(rows, dtype, output_dtype, timeout_ms)
        req.id = id
        self._send(req, self._deadline())
        self._inflight += 1

    def recv(self):
        """The next answer to a pipelined request, in arrival order (any
        id). Returns an InferResult whatever its status: check .ok or call
        .raise_for_status(). A timeout raises TransportError and loses
        nothing: call again."""
        self._check()
        if self.inflight == 0:
            raise MlpdError("recv(): no request in flight")
        return InferResult(self._next(self._deadline()))

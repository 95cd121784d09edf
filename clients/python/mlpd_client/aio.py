# SPDX-License-Identifier: Apache-2.0
"""asyncio client for mlpd: many requests in flight on one connection.

    async with await AsyncClient.connect("/run/mlpd/mlpd.sock") as c:
        results = await asyncio.gather(*(c.infer(x) for x in batches))

The daemon answers requests on one connection in any order (it batches rows
of concurrent requests and finishes them as their batches complete), each
answer carrying its request's id; so the client gives every request a fresh
id and one reader task hands each answer to the request waiting for that id.
Any number of coroutines may call infer() at once; each frame is written
whole, so requests never interleave on the wire.

Errors are those of the blocking Client (client.py): a StatusError subclass
when the daemon refuses a request (that request only), TransportError when
no answer can come (the daemon hung up, a frame that does not decode, a
response over max_frame): then every request in flight fails with it and the
client is unusable; FrameTooLarge for a request over max_frame (nothing
sent). A connection the daemon refuses as a whole (answer id 0) fails every
request in flight with that status. A per-call timeout (timeout=, seconds)
raises asyncio.TimeoutError and forgets the request; its late answer is
dropped when it comes. Shared-memory regions are the blocking Client's.
"""

import asyncio
import os

from . import mlpd_pb2 as pb
from .client import (DEFAULT_MAX_FRAME, DEFAULT_SOCKET, FrameTooLarge,
                     Health, InferResult, MlpdError, ModelInfo,
                     TransportError, _encode_rows, _grow_send_buffer,
                     _set_model, _status_error, _varint, _wire_dtype)

_ID_MAX = 1 << 63  # ids stay below 2**63, as the blocking client's pipelined


class AsyncClient:
    """One connection to mlpd, used from one event loop.

    Make it with ``await AsyncClient.connect(socket_path, max_frame=...)``
    (socket_path defaults to $MLPD_SOCKET, else /run/mlpd/mlpd.sock); close
    it with ``await close()`` or ``async with``.
    """

    def __init__(self, reader, writer, path, max_frame):
        self.path = path
        self.max_frame = max_frame
        self._reader = reader
        self._writer = writer
        self._pending = {}  # id -> Future of its Response
        self._next_id = 1
        self._broken = None  # the exception every later call raises
        self._drain_lock = asyncio.Lock()
        self._sock = writer.get_extra_info("socket")  # for its send buffer
        self._sndbuf = None  # SO_SNDBUF as asked (client._grow_send_buffer)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, socket_path=None, max_frame=DEFAULT_MAX_FRAME):
        path = (socket_path or os.environ.get("MLPD_SOCKET")
                or DEFAULT_SOCKET)
        try:
            # The stream buffer limit only matters to readline(); frames
            # are read with readexactly().
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError as e:
            raise TransportError("connect to %s: %s" % (path, e.strerror or e),
                                 errno=e.errno) from e
        return cls(reader, writer, path, max_frame)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    @property
    def inflight(self):
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def close(self):
        if self._broken is None:
            self._broken = TransportError("client closed")
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass
        self._fail_all(self._broken)

    # ---- reading ----

    async def _frame(self):
        """The next frame's body, or None at a clean end of stream."""
        n = shift = 0
        for i in range(10):
            b = await self._reader.read(1)
            if not b:
                if i == 0:
                    return None
                raise TransportError("the daemon hung up inside a frame "
                                     "header")
            n |= (b[0] & 0x7F) << shift
            shift += 7
            if not b[0] & 0x80:
                break
        else:
            raise TransportError("frame length varint over 10 bytes")
        if n > self.max_frame:
            raise TransportError("response frame of %d bytes is over "
                                 "max_frame (%d)" % (n, self.max_frame))
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError as e:
            raise TransportError("the daemon hung up inside a %d-byte frame"
                                 % n) from e

    async def _read_loop(self):
        try:
            while True:
                body = await self._frame()
                if body is None:
                    raise TransportError("the daemon closed the connection")
                resp = pb.Response()
                try:
                    resp.ParseFromString(body)
                except Exception as e:  # DecodeError, and its relatives
                    raise TransportError("a response does not decode: %s"
                                         % e) from e
                fut = self._pending.pop(resp.id, None)
                if fut is not None:
                    if not fut.done():
                        fut.set_result(resp)
                elif resp.id == 0 and resp.status != pb.OK:
                    # The daemon refused the connection as a whole.
                    raise _status_error(resp.status, resp.message, 0)
                # Else: the late answer to a request whose caller gave up.
        except asyncio.CancelledError:
            raise
        except MlpdError as e:
            self._broken = e
            self._fail_all(e)
        except OSError as e:
            err = TransportError("receive: %s" % (e.strerror or e),
                                 errno=e.errno)
            self._broken = err
            self._fail_all(err)

    def _fail_all(self, exc):
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    # ---- sending ----

    async def _call(self, req, timeout=None):
        if self._broken is not None:
            raise self._broken
        req.id = self._next_id
        self._next_id = self._next_id + 1 if self._next_id + 1 < _ID_MAX else 1
        body = req.SerializeToString()
        if len(body) > self.max_frame:
            raise FrameTooLarge("request of %d bytes is over max_frame (%d)"
                                % (len(body), self.max_frame))
        fut = asyncio.get_running_loop().create_future()
        self._pending[req.id] = fut
        try:
            try:
                # One write() per frame: frames of concurrent calls never
                # interleave. drain() waits while the socket's buffer is
                # full.
                frame = _varint(len(body)) + body
                if self._sock is not None:
                    self._sndbuf = _grow_send_buffer(self._sock, self._sndbuf,
                                                     len(frame))
                self._writer.write(frame)
                async with self._drain_lock:
                    await self._writer.drain()
            except OSError as e:
                err = TransportError("send: %s" % (e.strerror or e),
                                     errno=e.errno)
                self._broken = err
                self._fail_all(err)
                raise err from e
            # (Not inside the OSError handler: asyncio.TimeoutError is an
            # OSError since Python 3.11, and a timeout breaks nothing.)
            if timeout is None:
                return await fut
            return await asyncio.wait_for(fut, timeout)
        finally:
            # On a timeout or cancellation, forget the id: its answer, when
            # it comes, is dropped by the reader.
            self._pending.pop(req.id, None)

    async def _simple(self, kind, name=None, timeout=None):
        req = pb.Request()
        getattr(req, kind).SetInParent()
        if name:
            getattr(req, kind).name = name
        r = await self._call(req, timeout)
        if r.status != pb.OK:
            raise _status_error(r.status, r.message, r.id)
        if r.WhichOneof("kind") != kind:
            raise TransportError("%s: the daemon's answer is of another kind"
                                 % kind)
        return getattr(r, kind)

    # ---- API ----

    async def infer(self, rows, dtype=None, output_dtype=None, timeout_ms=0,
                    model=None, timeout=None):
        """Runs the model on rows; returns an InferResult (raises a
        StatusError subclass when the daemon refuses). rows, dtype,
        output_dtype, timeout_ms and model as for Client.infer(); timeout:
        seconds to wait for the answer (None: forever)."""
        req = pb.Request()
        ir = req.infer
        _set_model(ir, model)
        data, nrows, ncols, wire = _encode_rows(rows, dtype)
        ir.input.dtype = wire
        ir.input.shape.extend([nrows, ncols])
        ir.input.data = data
        ir.timeout_ms = int(timeout_ms or 0)
        ir.output_dtype = _wire_dtype(output_dtype)
        r = await self._call(req, timeout)
        return InferResult(r).raise_for_status()

    async def health(self, timeout=None):
        h = await self._simple("health", timeout=timeout)
        return Health(h.live, h.ready, h.state)

    async def ready(self, timeout=None):
        return (await self.health(timeout)).ready

    async def metrics(self, timeout=None):
        return (await self._simple("metrics", timeout=timeout)).text

    async def model_info(self, name=None, timeout=None):
        return ModelInfo(await self._simple("model_info", name, timeout))

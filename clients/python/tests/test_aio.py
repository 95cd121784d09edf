# SPDX-License-Identifier: Apache-2.0
"""AsyncClient (mlpd_client/aio.py): many coroutines' requests in flight on
one connection, against the real daemon (numbers checked against the numpy
reference) and against a scripted fake daemon for what a well-behaved one
never does (answers in reverse order, hang-ups, refusals). The model= field
of issue 16, on both clients."""
import asyncio
import socket
import time

import pytest

import mlpd_client
from mlpd_client import AsyncClient, Client, mlpd_pb2 as pb

from conftest import wmem_max
from test_wire import Fake, frame

np = pytest.importorskip("numpy")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def assert_close(got, want, rel=1e-5, atol=1e-4):
    got = np.asarray(got, dtype=np.float64)
    err = np.abs(got - want)
    assert not (err > rel * np.abs(want) + atol).any(), err.max()


def test_many_in_flight(daemon, reference):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1 + i % 13, 64)).astype(np.float32)
          for i in range(200)]

    async def main():
        async with await AsyncClient.connect(daemon) as c:
            tasks = [asyncio.ensure_future(c.infer(x)) for x in xs]
            # Every request is written before any answer is awaited: all
            # are in flight together on the one connection.
            await asyncio.sleep(0)
            peak = c.inflight
            res = await asyncio.gather(*tasks)
            assert c.inflight == 0
            return peak, res

    peak, res = run(main())
    assert peak > 1
    for x, r in zip(xs, res):
        assert r.ok and r.shape == (len(x), 10)
        assert_close(r.output, reference(x))
    assert len({r.id for r in res}) == len(res)


def test_send_buffer(daemon, heldout):
    """As the blocking client's: a request larger than the socket's send
    buffer grows it (up to net.core.wmem_max); small ones leave it."""
    rows = 1000  # 256 KB of f32 rows: over the 208 KiB default
    x = np.resize(heldout[0], (rows, heldout[0].shape[1])).astype(np.float32)

    def send_buffer(c):
        sock = c._writer.get_extra_info("socket")
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)

    async def main():
        async with await AsyncClient.connect(daemon) as c:
            before = send_buffer(c)
            assert (await c.infer(x[:1])).ok
            small = send_buffer(c)
            r = await c.infer(x)
            assert r.ok and r.shape[0] == rows
            return before, small, send_buffer(c)

    before, small, after = run(main())
    assert small == before
    limit = wmem_max()
    cap = x.nbytes if limit is None else min(x.nbytes, limit)
    assert after >= 2 * cap  # the kernel reports twice what was asked


def test_refusal_is_per_request(daemon, heldout):
    x = heldout[0][:4]

    async def main():
        async with await AsyncClient.connect(daemon) as c:
            good = [c.infer(x) for _ in range(5)]
            bad = c.infer(x[:, :63])
            res = await asyncio.gather(*good, bad, return_exceptions=True)
            assert all(r.ok for r in res[:5])
            assert isinstance(res[5], mlpd_client.InvalidArgument)
            assert "63" in res[5].message
            # Still usable afterwards, for every kind of call.
            assert (await c.health()).ready
            assert "mlpd_" in await c.metrics()
            info = await c.model_info()
            assert info.in_features == 64 and info.out_features == 10
            # The default model by its empty name.
            assert (await c.infer(x, model="", dtype="bf16")).dtype == "bf16"

    run(main())


def test_missing_socket(tmp_path):
    with pytest.raises(mlpd_client.TransportError):
        run(AsyncClient.connect(str(tmp_path / "none.sock")))


def test_frame_limit(daemon):
    async def main():
        async with await AsyncClient.connect(daemon, max_frame=1024) as c:
            with pytest.raises(mlpd_client.FrameTooLarge):
                await c.infer(np.zeros((8, 64), np.float32))
            assert (await c.infer(np.zeros((1, 64), np.float32))).ok

    run(main())


def test_out_of_order_by_id_and_model_field(tmp_path):
    """The fake answers three requests in reverse order; each caller gets
    its own answer. The model names travel in InferRequest.model."""
    seen = []

    def script(conn, f):
        reqs = [f.next(conn) for _ in range(3)]
        out = b""
        for q in reversed(reqs):
            seen.append(q.infer.model)
            r = pb.Response(id=q.id)
            r.infer.output.CopyFrom(q.infer.input)
            out += frame(r)
        conn.sendall(out)
        while f.next(conn):
            pass

    fake = Fake(tmp_path, script)

    async def main():
        async with await AsyncClient.connect(fake.path) as c:
            return await asyncio.gather(
                c.infer([[1.0, 2.0]], model="a"),
                c.infer([[3.0, 4.0], [5.0, 6.0]], model="b"),
                c.infer([[7.0]]))

    r = run(main())
    fake.join()
    assert [list(map(float, row)) for row in r[0].output] == [[1.0, 2.0]]
    assert r[1].shape == (2, 2) and r[2].shape == (1, 1)
    assert sorted(seen) == ["", "a", "b"]


def test_late_answer_after_timeout_is_dropped(tmp_path):
    def script(conn, f):
        first = f.next(conn)
        second = f.next(conn)
        h = pb.Response(id=first.id)
        h.health.state = "late"
        h2 = pb.Response(id=second.id)
        h2.health.state = "on time"
        conn.sendall(frame(h) + frame(h2))
        while f.next(conn):
            pass

    fake = Fake(tmp_path, script)

    async def main():
        async with await AsyncClient.connect(fake.path) as c:
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await c.health(timeout=0.1)
            assert time.monotonic() - t0 >= 0.09 and c.inflight == 0
            assert (await c.health()).state == "on time"

    run(main())
    fake.join()


@pytest.mark.parametrize("how", ["hang-up", "garbage", "refusal"])
def test_every_waiter_fails_together(tmp_path, how):
    def script(conn, f):
        for _ in range(3):
            f.next(conn)
        if how == "garbage":
            conn.sendall(b"\x05\xff\xff\xff\xff\xff")
        elif how == "refusal":
            conn.sendall(frame(pb.Response(id=0, status=pb.RESOURCE_EXHAUSTED,
                                           message="too many connections")))

    fake = Fake(tmp_path, script)

    async def main():
        async with await AsyncClient.connect(fake.path) as c:
            res = await asyncio.gather(*(c.infer([[1.0]]) for _ in range(3)),
                                       return_exceptions=True)
            want = (mlpd_client.ResourceExhausted if how == "refusal"
                    else mlpd_client.TransportError)
            assert all(isinstance(e, want) for e in res), res
            # And every later call, at once.
            with pytest.raises(want):
                await c.infer([[1.0]])

    run(main())
    fake.join()


def test_blocking_client_model_field(tmp_path):
    got = []

    def script(conn, f):
        for _ in range(3):
            q = f.next(conn)
            kind = q.WhichOneof("kind")
            got.append(q.infer.model if kind == "infer"
                       else q.model_info.name)
            r = pb.Response(id=q.id)
            if kind == "infer":
                r.infer.output.CopyFrom(q.infer.input)
            else:
                r.model_info.in_features = 2
            conn.sendall(frame(r))
        while f.next(conn):
            pass

    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=10) as c:
        c.infer([[1.0, 2.0]], model="digits")
        c.infer([[1.0, 2.0]])
        assert c.model_info("digits").in_features == 2
        with pytest.raises(ValueError):
            c.infer([[1.0]], model="x" * 128)
    fake.join()
    assert got == ["digits", "", "digits"]

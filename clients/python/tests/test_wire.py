# SPDX-License-Identifier: Apache-2.0
"""mlpd_client against a scripted fake daemon (a thread on a temporary
socket): the error handling a well-behaved daemon never exercises. No
daemon binary is needed."""
import multiprocessing
import os
import resource
import socket
import threading
import time

import pytest

import mlpd_client
from mlpd_client import Client, mlpd_pb2 as pb
from mlpd_client.client import _varint


class Fake:
    """Accepts one connection and runs script(conn, fake) on it, on a
    thread, or with process=True in a process of its own (forked), whose
    sleeps and GIL are not the client thread's."""

    def __init__(self, tmp_path, script, process=False):
        self.path = str(tmp_path / "fake.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(1)
        self.buf = b""
        self.script = script
        if process:
            self.t = multiprocessing.get_context("fork").Process(
                target=self._run, daemon=True)
        else:
            self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        conn, _ = self.srv.accept()
        with conn:
            self.script(conn, self)

    def next(self, conn):
        """The next Request, or None at EOF."""
        while True:
            n = shift = 0
            for i, b in enumerate(self.buf[:10]):
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    if len(self.buf) >= i + 1 + n:
                        r = pb.Request()
                        r.ParseFromString(self.buf[i + 1:i + 1 + n])
                        self.buf = self.buf[i + 1 + n:]
                        return r
                    break
            data = conn.recv(65536)
            if not data:
                return None
            self.buf += data

    def join(self):
        self.t.join(10)
        self.srv.close()


def frame(resp):
    body = resp.SerializeToString()
    return _varint(len(body)) + body


def health(id, state="ready"):
    r = pb.Response(id=id)
    r.health.live = True
    r.health.ready = True
    r.health.state = state
    return r


def test_late_answer_is_dropped(tmp_path):
    def script(conn, f):
        first = f.next(conn)           # never answered in time
        second = f.next(conn)
        conn.sendall(frame(health(first.id, "late")) +
                     frame(health(second.id, "on time")))
        while f.next(conn):
            pass
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=0.15) as c:
        t0 = time.monotonic()
        with pytest.raises(mlpd_client.TransportError) as e:
            c.health()
        assert e.value.timed_out and time.monotonic() - t0 >= 0.14
        c.timeout = 10
        assert c.health().state == "on time"
    fake.join()


def _voluntary_switches():
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


@pytest.mark.parametrize("spin", [0, 1000000])
def test_spin(tmp_path, spin):
    """spin_us: a call waiting for its answer polls instead of sleeping, so
    an answer that comes within the spin (here a second) costs the thread
    no sleep (the kernel counts each sleep as a voluntary context switch);
    without it, every call sleeps. The fake answers 2 ms late, so no answer
    is there when the client first looks, however fast the machine."""
    def script(conn, f):
        while (req := f.next(conn)) is not None:
            time.sleep(0.002)
            conn.sendall(frame(health(req.id)))
    n = 20
    fake = Fake(tmp_path, script, process=True)
    with Client(fake.path, timeout=30, spin_us=spin) as c:
        before = _voluntary_switches()
        for _ in range(n):
            assert c.health().live
        slept = _voluntary_switches() - before
    fake.join()
    assert fake.t.exitcode == 0
    print("spin %d: %d of %d calls slept" % (spin, slept, n))
    if spin:
        assert slept <= 2
    else:
        assert slept >= n // 2


def test_spin_within_timeout(tmp_path):
    """Nobody answers: a 300 ms timeout with a 10 s spin still gives up
    after about 300 ms, the spin counted in it."""
    def script(conn, f):
        while f.next(conn):
            pass
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=0.3, spin_us=10000000) as c:
        t0 = time.monotonic()
        with pytest.raises(mlpd_client.TransportError) as e:
            c.health()
        took = time.monotonic() - t0
    fake.join()
    assert e.value.timed_out
    assert 0.29 <= took < 0.5, took


def test_pipelined_out_of_order_and_status(tmp_path):
    def script(conn, f):
        reqs = [f.next(conn) for _ in range(3)]
        out = b""
        for q in reversed(reqs):
            r = pb.Response(id=q.id)
            if q.infer.input.shape[1] != 2:
                r.status = pb.INVALID_ARGUMENT
                r.message = "input has %d columns" % q.infer.input.shape[1]
            else:
                r.infer.output.CopyFrom(q.infer.input)
                r.infer.queue_us = 5
            out += frame(r)
        conn.sendall(out)
        while f.next(conn):
            pass
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=10) as c:
        c.send([[1.0, 2.0]], id=10)
        c.send([[1.0, 2.0, 3.0]], id=11)
        c.send([[3.0, 4.0], [5.0, 6.0]], id=12, dtype="bf16")
        got = [c.recv() for _ in range(3)]
        assert [r.id for r in got] == [12, 11, 10]
        assert got[0].dtype == "bf16" and got[0].shape == (2, 2)
        assert [list(map(float, row)) for row in got[0].output] == \
            [[3.0, 4.0], [5.0, 6.0]]
        assert not got[1].ok and got[1].message == "input has 3 columns"
        with pytest.raises(mlpd_client.InvalidArgument):
            got[1].raise_for_status()
        assert got[2].ok and got[2].queue_us == 5
    fake.join()


@pytest.mark.parametrize("how", ["hangup_mid", "hangup", "huge", "short"])
def test_misbehaving_daemon(tmp_path, how):
    def script(conn, f):
        q = f.next(conn)
        if how == "hangup_mid":
            conn.sendall(frame(health(q.id))[:-2])
        elif how == "huge":
            conn.sendall(_varint(1 << 40))
        elif how == "short":
            r = pb.Response(id=q.id)
            r.infer.output.dtype = pb.DTYPE_F32
            r.infer.output.shape.extend([1, 2])
            r.infer.output.data = b"\0\0\0\0"
            conn.sendall(frame(r))
            while f.next(conn):
                pass
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=10, max_frame=1 << 20) as c:
        with pytest.raises(mlpd_client.TransportError) as e:
            if how == "short":
                c.infer([[1.0, 2.0]])
            else:
                c.health()
        msg = str(e.value)
        assert {"hangup_mid": "in the middle of a response",
                "hangup": "1 request(s) unanswered",
                "huge": "exceeds the client's limit",
                "short": "needs 8 bytes but carries 4"}[how] in msg, msg
        if how != "short":  # the stream is desynchronised for good
            with pytest.raises(mlpd_client.TransportError) as e2:
                c.health()
            assert "unusable" in str(e2.value)
    fake.join()


@pytest.mark.parametrize("at_once", [False, True])
def test_refused_connection(tmp_path, at_once):
    """The daemon's refusal of a whole connection (id 0, then it hangs up)
    is raised as that status's class, and the client is broken after."""
    def script(conn, f):
        if not at_once:
            f.next(conn)
        r = pb.Response(id=0, status=pb.PERMISSION_DENIED,
                        message="uid 65534 may not use this daemon "
                                "(--allow-uid)")
        conn.sendall(frame(r))
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=10) as c:
        if at_once:
            fake.join()  # refused and closed before the request goes
        with pytest.raises(mlpd_client.PermissionDenied) as e:
            c.health()
        assert "--allow-uid" in e.value.message
        assert e.value.status_name == "PERMISSION_DENIED"
        with pytest.raises(mlpd_client.TransportError) as e2:
            c.health()
        assert "unusable" in str(e2.value)
    fake.join()


def test_region_on_the_wire(tmp_path):
    """RegisterRegion goes with exactly one descriptor, on the frame's
    first byte: a sealed memfd of the size asked; windows name the array's
    place in the region; an answer without data is an output in place."""
    np = pytest.importorskip("numpy")
    import fcntl
    import mmap
    seen = {}

    def script(conn, f):
        # The request's first bytes arrive with the descriptor.
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
        f.buf += data
        seen["fds"] = len(fds)
        q = f.next(conn)
        st = os.fstat(fds[0])
        seen["size"] = (q.register_region.size, st.st_size)
        seen["seals"] = fcntl.fcntl(fds[0], fcntl.F_GET_SEALS)
        m = mmap.mmap(fds[0], st.st_size)
        m[-4:] = b"mark"
        for fd in fds:
            os.close(fd)
        r = pb.Response(id=q.id)
        r.register_region.size = q.register_region.size
        conn.sendall(frame(r))
        q = f.next(conn)
        seen["in"] = (q.infer.input.region.region, q.infer.input.region.offset,
                      q.infer.input.region.length, q.infer.input.data)
        o = q.infer.output_region
        seen["out"] = (o.region, o.offset, o.length, q.infer.output_dtype)
        m[o.offset:o.offset + 4] = b"\x00\x00\x80\x3f"  # 1.0f
        r = pb.Response(id=q.id)
        r.infer.output.dtype = pb.DTYPE_F32
        r.infer.output.shape.extend([1, 1])
        r.infer.device = "fake:0"
        conn.sendall(frame(r))
        while f.next(conn):
            pass
        m.close()
    fake = Fake(tmp_path, script)
    with Client(fake.path, timeout=10) as c:
        reg = c.register_region("w", 4096)
        assert reg.buffer[-4:] == b"mark"  # the fake wrote through its map
        x = reg.array("f32", (1, 2), offset=8)
        x[:] = [[1.0, 2.0]]
        y = reg.array("f32", (1, 1), offset=64)
        r = c.infer(x, out=y)
        assert r.to_region and r.shape == (1, 1) and r.device == "fake:0"
        assert float(y[0, 0]) == 1.0 and r.output is not None
    fake.join()
    assert seen["fds"] == 1
    assert seen["size"] == (4096, 4096)
    import fcntl as f2
    assert seen["seals"] & f2.F_SEAL_SHRINK and seen["seals"] & f2.F_SEAL_GROW
    assert seen["in"] == ("w", 8, 8, b"")
    assert seen["out"] == ("w", 64, 4, pb.DTYPE_F32)

# SPDX-License-Identifier: Apache-2.0
"""mlpd_client against the real daemon serving models/digits.safetensors on
the CPU engine: numbers checked against a numpy forward pass of the same
file, statuses, pipelining, health, metrics and model info."""
import re
import socket

import pytest

import mlpd_client
from conftest import wmem_max
from mlpd_client import Client

np = pytest.importorskip("numpy")

# Half the spacing of each output dtype relative to a value, plus the fp32
# engine's own rounding.
REL = {"f32": 1e-5, "f16": 2.0 ** -11 + 1e-5, "bf16": 2.0 ** -8 + 1e-5}


def quantize(x, dtype):
    """x rounded to dtype and back, as the daemon will see it."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f32":
        return x
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.view(np.float32)


def assert_close(got, want, rel, atol=1e-5):
    got = np.asarray(got, dtype=np.float64)
    err = np.abs(got - want)
    bad = err > rel * np.abs(want) + atol
    assert not bad.any(), "max error %.3g at %s: got %r, want %r" % (
        err.max(), np.argwhere(bad)[0], got[bad][0], want[bad][0])


def test_accuracy_over_socket(client, heldout, reference):
    x, labels = heldout
    outs = []
    for i in range(0, len(x), 60):
        r = client.infer(x[i:i + 60])
        assert r.ok and r.status_name == "OK" and r.message == ""
        assert r.shape == (min(60, len(x) - i), 10) and r.dtype == "f32"
        assert r.batch_rows >= r.shape[0]
        outs.append(r.output)
    y = np.concatenate(outs)
    assert_close(y, reference(x), REL["f32"], 1e-4)
    acc = float((y.argmax(1) == labels).mean())
    assert acc >= 0.95, acc


@pytest.mark.parametrize("in_dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16", None])
def test_dtypes(client, heldout, reference, in_dtype, out_dtype):
    x = heldout[0][:40]
    r = client.infer(x, dtype=in_dtype, output_dtype=out_dtype)
    want_dtype = out_dtype or in_dtype
    assert r.dtype == want_dtype
    assert len(r.raw) == 40 * 10 * {"f32": 4, "f16": 2, "bf16": 2}[want_dtype]
    assert r.output.dtype == np.float32
    want = reference(quantize(x, in_dtype))
    assert_close(r.output, want, REL[want_dtype], 1e-4)


def test_list_rows(client, heldout, reference):
    """Plain Python lists in, every dtype, same numbers as numpy input."""
    x = heldout[0][:5]
    rows = x.tolist()
    for dt in ("f32", "f16", "bf16"):
        a = client.infer(rows, dtype=dt)
        b = client.infer(x, dtype=dt)
        assert a.raw == b.raw
        assert_close(a.output, reference(quantize(x, dt)), REL[dt], 1e-4)
    one = client.infer(x[0])  # a single 1-D row
    assert one.shape == (1, 10)


def test_pipelined_by_id(client, reference):
    rng = np.random.default_rng(3)
    sent = {}
    for i in range(60):
        n = 1 + (i * 5) % 17
        x = rng.standard_normal((n, 64)).astype(np.float32)
        rid = 1_000_003 * i + 17
        client.send(x, id=rid)
        sent[rid] = x
    assert client.inflight == 60
    with pytest.raises(mlpd_client.MlpdError):
        client.health()  # blocking calls wait until the pipeline is empty
    got = {}
    while client.inflight:
        r = client.recv()
        assert r.id in sent and r.id not in got
        got[r.id] = r.raise_for_status()
    assert set(got) == set(sent)
    for rid, x in sent.items():
        assert got[rid].shape == (len(x), 10)
        assert_close(got[rid].output, reference(x), REL["f32"], 1e-4)
    with pytest.raises(mlpd_client.MlpdError):
        client.recv()  # nothing in flight: refused, not a hang


def test_wrong_columns(client, heldout):
    x = heldout[0][:3, :63]
    with pytest.raises(mlpd_client.InvalidArgument) as e:
        client.infer(x)
    assert e.value.status == mlpd_client.mlpd_pb2.INVALID_ARGUMENT
    assert "63" in e.value.message and "64" in e.value.message
    assert isinstance(e.value, mlpd_client.StatusError)
    # The connection is still good...
    assert client.infer(heldout[0][:3]).ok
    # ...and pipelined, the refusal is a result field among good answers.
    client.send(heldout[0][:2], id=1)
    client.send(x, id=2)
    client.send(heldout[0][:2], id=3)
    res = {r.id: r for r in (client.recv(), client.recv(), client.recv())}
    assert res[1].ok and res[3].ok
    assert res[2].status_name == "INVALID_ARGUMENT" and res[2].output is None
    with pytest.raises(mlpd_client.InvalidArgument):
        res[2].raise_for_status()


def test_health_ready(client):
    h = client.health()
    assert h.live and h.ready and h.state == "ready"
    assert client.ready()


def test_model_info(client, daemon):
    m = client.model_info()
    assert m.path.endswith("digits.safetensors")
    assert [(l.in_features, l.out_features, l.activation) for l in m.layers] \
        == [(64, 128, "gelu_tanh"), (128, 128, "gelu_tanh"), (128, 10, "none")]
    assert (m.in_features, m.out_features) == (64, 10)
    assert m.file_dtype == "f32" and m.compute_dtype == "f32"
    assert m.engine == "cpu" and m.device
    assert m.max_batch == 256 and m.generation == 1
    assert m.device_memory_bytes == 0 and m.host_memory_bytes > 0


def ok_count(text):
    m = re.search(r'^mlpd_requests_total\{status="ok"\} (\S+)$', text, re.M)
    assert m, "mlpd_requests_total{status=\"ok\"} missing"
    return float(m.group(1))


def test_metrics(client, heldout):
    t0 = client.metrics()
    assert "# TYPE mlpd_request_duration_seconds histogram" in t0
    assert "# TYPE mlpd_batch_rows histogram" in t0
    assert "mlpd_model_info{" in t0
    for _ in range(4):
        client.infer(heldout[0][:2])
    assert ok_count(client.metrics()) - ok_count(t0) >= 4


def test_frame_limit(daemon, heldout):
    with Client(daemon, timeout=30, max_frame=1000) as c:
        with pytest.raises(mlpd_client.FrameTooLarge):
            c.infer(heldout[0][:64])  # 16 KiB: refused before sending
        assert c.infer(heldout[0][:1]).ok  # the connection is untouched


def test_missing_socket(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(mlpd_client.TransportError) as e:
        Client(path)
    assert path in str(e.value) and e.value.errno == 2


def test_context_manager_closes(daemon):
    with Client(daemon) as c:
        assert c.health().live
    with pytest.raises(mlpd_client.TransportError):
        c.health()


def test_spin(heldout, reference, daemon):
    """spin_us against the real daemon: a spinning client's answers are the
    daemon's (test_wire.py counts the sleeps it saves and holds it to the
    call's timeout)."""
    x = heldout[0][:3]
    with Client(daemon, timeout=30, spin_us=1000000) as c:
        for _ in range(5):
            r = c.infer(x)
            assert r.ok
            assert_close(r.output, reference(x), REL["f32"])


def _send_buffer(c):
    return c._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def test_send_buffer(client, heldout):
    """The socket's send buffer: the kernel's default while requests are
    small, grown to hold a request larger than it (so that it goes out in
    one write), as far as net.core.wmem_max lets it."""
    rows = 1000  # 256 KB of f32 rows: over the 208 KiB default
    x = np.resize(heldout[0], (rows, heldout[0].shape[1]))
    before = _send_buffer(client)
    assert client.infer(x[:1]).ok
    assert _send_buffer(client) == before
    r = client.infer(x)
    assert r.ok and r.shape[0] == rows
    after = _send_buffer(client)
    frame = x.astype(np.float32).nbytes
    limit = wmem_max()
    cap = frame if limit is None else min(frame, limit)
    print("send buffer: %d bytes, %d after a %d-byte request "
          "(net.core.wmem_max %s)" % (before, after, frame, limit))
    assert after >= 2 * cap  # the kernel reports twice what was asked

# SPDX-License-Identifier: Apache-2.0
"""Shared-memory regions through mlpd_client against the real daemon (CPU
engine, digits model): numpy arrays backed by a region as inputs and as
out=, equal to the inline answers bit for bit; pipelining with out=;
refusals (a descriptor the daemon will not map, windows outside, a
read-only region as output, duplicate names, limits); a client that hangs
up with requests in flight; a peer whose uid is not allowed."""
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import mlpd_client
from mlpd_client import Client

from conftest import ROOT, running_daemon

np = pytest.importorskip("numpy")


def metric(client, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), client.metrics(), re.M)
    assert m, "%s missing" % name
    return float(m.group(1))


def wait_metric(client, name, want):
    """The daemon settles asynchronously (a close, a batch): wait for it,
    with a generous bound."""
    for _ in range(3000):
        v = metric(client, name)
        if v == want:
            return
        time.sleep(0.01)
    pytest.fail("%s is %g, expected %g" % (name, v, want))


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_region_arrays_bit_for_bit(client, heldout, dtype):
    x0 = heldout[0][:50]
    with client.register_region("py-io", 1 << 20) as reg:
        assert reg.writable and reg.size == 1 << 20
        assert metric(client, "mlpd_shm_regions") == 1
        x = reg.array(dtype, x0.shape, offset=24)
        x[:] = x0 if dtype == "f32" else to_bf16_bits(x0)
        y = reg.array(dtype, (50, 10), offset=100003)  # odd: no alignment
        inline = client.infer(x0, dtype=dtype)
        # Inline, a uint16 array with dtype bf16 is bit patterns too.
        assert client.infer(np.array(x), dtype=dtype).raw == inline.raw
        # Input from the region, output inline.
        a = client.infer(x, dtype=dtype)
        assert not a.to_region and a.raw == inline.raw
        # Output into the region, input inline and from the region.
        for src in (x0, x):
            y[:] = 0
            b = client.infer(src, dtype=dtype, out=y)
            assert b.to_region and b.raw is None and b.out is y
            assert b.shape == (50, 10) and b.dtype == dtype
            assert y.tobytes() == inline.raw
            assert np.array_equal(b.output, inline.output)
            if dtype == "f32":
                assert b.output is y  # no copy
        # A row slice of a region array is a window of its own.
        c = client.infer(x[10:20], dtype=dtype, out=y[:10])
        assert y[:10].tobytes() == client.infer(x[10:20].copy(),
                                                 dtype=dtype).raw
        assert c.device
    # Closed: unregistered, unmapped by the daemon.
    assert metric(client, "mlpd_shm_mapped_bytes") == 0


def test_pipelined_out(client, heldout, reference):
    x0 = heldout[0]
    with client.register_region("pipe", 4 << 20) as reg:
        n = 40
        xs, ys = [], []
        off = 0
        for i in range(n):
            rows = 1 + i % 9
            x = reg.array("f32", (rows, 64), offset=off)
            off += x.nbytes
            y = reg.array("f32", (rows, 10), offset=off)
            off += y.nbytes
            x[:] = x0[i:i + rows]
            y[:] = np.nan
            xs.append(x)
            ys.append(y)
        for i in range(n):
            client.send(xs[i], id=i, out=ys[i])
        seen = set()
        while client.inflight:
            r = client.recv().raise_for_status()
            assert r.to_region and r.out is ys[r.id]
            seen.add(r.id)
        assert seen == set(range(n))
        for i in range(n):
            want = reference(x0[i:i + 1 + i % 9])
            got = ys[i].astype(np.float64)
            assert np.all(np.abs(got - want) <= 1e-5 * np.abs(want) + 1e-4)


def test_refusals(client, heldout, tmp_path):
    x0 = heldout[0][:4]
    with client.register_region("r", 4096) as reg:
        x = reg.array("f32", (4, 64))
        x[:] = x0
        with pytest.raises(mlpd_client.InvalidArgument) as e:
            client.register_region("r", 4096)  # same name, same connection
        assert "already registered" in e.value.message
        # A second client may use the name; it does not see this region.
        with Client(client.path, timeout=30) as other:
            with pytest.raises(mlpd_client.InvalidArgument) as e:
                other.unregister_region("r")
            assert "'r'" in e.value.message
        # An output window of the wrong shape: the daemon says the size.
        y = reg.array("f32", (4, 11), offset=x.nbytes)
        with pytest.raises(mlpd_client.InvalidArgument) as e:
            client.infer(x, out=y)
        assert "160" in e.value.message
        # Arrays that are not in a registered region cannot be out=.
        with pytest.raises(ValueError):
            client.infer(x, out=np.zeros((4, 10), np.float32))
        # Nor may a region array be converted on the way.
        with pytest.raises(ValueError):
            client.infer(x, dtype="bf16")
        assert client.infer(x).ok  # the connection is fine
    with pytest.raises(mlpd_client.InvalidArgument):
        client.unregister_region("r")  # gone with close()
    # Descriptors the daemon refuses to map.
    fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 8192)
    with pytest.raises(mlpd_client.InvalidArgument) as e:
        client.register_region("unsealed", 8192, fd=fd)
    assert "F_SEAL_SHRINK" in e.value.message and "'unsealed'" in e.value.message
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    with pytest.raises(mlpd_client.InvalidArgument) as e:
        client.register_region("small", 8193, fd=fd)
    assert "8192" in e.value.message
    os.close(fd)
    r, w = os.pipe()
    with pytest.raises(mlpd_client.InvalidArgument) as e:
        client.register_region("pipe", 100, fd=r)
    assert "memfd" in e.value.message
    os.close(r)
    os.close(w)
    assert client.health().ready
    assert metric(client, "mlpd_shm_mapped_bytes") == 0


def test_read_only_region(client, heldout):
    x0 = np.ascontiguousarray(heldout[0][:6], dtype="<f4")
    fd = os.memfd_create("ro", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 8192)
    os.pwrite(fd, x0.tobytes(), 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK |
                fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    with client.register_region("ro", 8192, fd=fd) as reg:
        assert not reg.writable
        x = reg.array("f32", (6, 64))
        assert not x.flags.writeable
        assert client.infer(x).raw == client.infer(x0).raw
        y = reg.array("f32", (6, 10), offset=x.nbytes)
        with pytest.raises(mlpd_client.InvalidArgument) as e:
            client.infer(x, out=y)
        assert "sealed against writes" in e.value.message
    os.close(fd)


def test_limits(tmp_path):
    with running_daemon(tmp_path, "--max-regions", "1",
                        "--max-shm-bytes", "65536") as sock:
        with Client(sock, timeout=30) as c, Client(sock, timeout=30) as d:
            a = c.register_region("a", 1000)
            with pytest.raises(mlpd_client.ResourceExhausted) as e:
                c.register_region("b", 1000)
            assert "--max-regions" in e.value.message
            with pytest.raises(mlpd_client.ResourceExhausted) as e:
                d.register_region("b", 65000)
            assert "--max-shm-bytes" in e.value.message
            d.register_region("b", 64536).close()
            a.close()


def test_client_gone_mid_request(daemon, heldout):
    x0 = heldout[0]
    c = Client(daemon, timeout=30)
    reg = c.register_region("gone", 8 << 20)
    x = reg.array("f32", (200, 64))
    x[:] = np.resize(x0, (200, 64))
    for i in range(40):
        c.send(x, id=i, out=reg.array("f32", (200, 10),
                                      offset=x.nbytes + i * 8000))
    c.close()  # with everything in flight
    reg.close()
    with Client(daemon, timeout=30) as b:
        assert b.infer(x0[:3]).ok
        wait_metric(b, "mlpd_shm_regions", 0)
        wait_metric(b, "mlpd_shm_mapped_bytes", 0)


def test_model_info_devices(client):
    m = client.model_info()
    assert len(m.devices) == 1
    assert m.devices[0].device == m.device and m.devices[0].in_rotation
    b0 = m.devices[0].batches
    client.infer([[0.0] * 64])
    assert client.model_info().devices[0].batches >= b0 + 1


def test_permission_denied():
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    # A directory uid 65534 can reach (pytest's own are private to root).
    tmp_path = Path(tempfile.mkdtemp(prefix="mlpd-py-"))
    os.chmod(str(tmp_path), 0o711)
    try:
        _permission_denied(tmp_path)
    finally:
        shutil.rmtree(str(tmp_path), ignore_errors=True)


def _permission_denied(tmp_path):
    # The client runs as nobody: it must be able to read the package.
    probe = subprocess.run(
        [sys.executable, "-c", "import os, sys; sys.exit(not os.access("
         "%r, os.R_OK))" % str(ROOT / "clients/python/mlpd_client/client.py")],
        user=65534, group=65534, extra_groups=[])
    if probe.returncode != 0:
        pytest.skip("uid 65534 cannot read the source tree")
    with running_daemon(tmp_path, "--allow-uid", "root",
                        "--socket-mode", "0666") as sock:
        code = (
            "import sys; sys.path.insert(0, %r)\n"
            "import mlpd_client\n"
            "c = mlpd_client.Client(%r, timeout=30)\n"
            "try:\n"
            "    c.health()\n"
            "except mlpd_client.PermissionDenied as e:\n"
            "    print(e)\n"
            "    try:\n"
            "        c.health()\n"
            "    except mlpd_client.TransportError as e2:\n"
            "        sys.exit(0 if 'unusable' in str(e2) else 3)\n"
            "sys.exit(2)\n" % (str(ROOT / "clients/python"), sock))
        p = subprocess.run([sys.executable, "-c", code], user=65534,
                           group=65534, extra_groups=[],
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "PERMISSION_DENIED" in p.stdout and "--allow-uid" in p.stdout
        with Client(sock, timeout=30) as c:  # root still gets in
            assert c.health().ready

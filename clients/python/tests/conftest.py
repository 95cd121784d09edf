# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the mlpd_client tests: a real daemon on a temporary socket
and a numpy reference of the model it serves.

The daemon binary is $MLPD_BIN (ctest passes the one it built), else
build/daemon/mlpd under the repository root; the tests are skipped when
neither exists.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))

import mlpd_client  # noqa: E402

MODEL = ROOT / "models" / "digits.safetensors"
HELDOUT = ROOT / "models" / "digits-heldout.safetensors"


def daemon_binary():
    b = os.environ.get("MLPD_BIN")
    if b:
        return b
    b = ROOT / "build" / "daemon" / "mlpd"
    return str(b) if b.exists() else None


def read_safetensors(path):
    """{name: float32 ndarray}, metadata: the project's own reader
    (models/stio.py), which needs numpy."""
    pytest.importorskip("numpy")
    sys.path.insert(0, str(ROOT / "models"))
    import stio  # noqa: E402
    return stio.read(path)


def wmem_max():
    """net.core.wmem_max, the kernel's cap on SO_SNDBUF, or None."""
    try:
        with open("/proc/sys/net/core/wmem_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


class Reference:
    """The served MLP in float64 numpy: Y = act(X W^T + b) per layer, ReLU
    or tanh GELU where the file's mlpd.activations says so."""

    def __init__(self, path):
        t, meta = read_safetensors(path)
        idx = sorted({int(k.split(".")[0]) for k in t})
        self.layers = [(t["%d.weight" % i].astype("f8"),
                        t["%d.bias" % i].astype("f8")) for i in idx]
        acts = meta.get("mlpd.activations")
        self.acts = (acts.split(",") if acts else
                     ["gelu_tanh"] * (len(idx) - 1) + ["none"])

    def __call__(self, x):
        import numpy as np
        y = np.asarray(x, dtype="f8")
        for (w, b), act in zip(self.layers, self.acts):
            y = y @ w.T + b
            if act == "relu":
                y = np.maximum(y, 0)
            elif act != "none":
                y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                           (y + 0.044715 * y ** 3)))
        return y


@pytest.fixture(scope="session")
def reference():
    return Reference(MODEL)


@pytest.fixture(scope="session")
def heldout():
    t, _ = read_safetensors(HELDOUT)
    return t["inputs"], t["labels"].astype(int)


@contextlib.contextmanager
def running_daemon(directory, *args):
    """A ready `mlpd serve` on the digits model (CPU engine) with extra
    flags, its socket in directory; yields the socket path, and on exit
    stops it with SIGTERM and checks it exits 0."""
    binary = daemon_binary()
    if binary is None:
        pytest.skip("no mlpd binary: set MLPD_BIN")
    sock = str(Path(directory) / "mlpd.sock")
    log = open(str(Path(directory) / "mlpd.log"), "w+")
    proc = subprocess.Popen(
        [binary, "serve", "--model", str(MODEL), "--socket", sock,
         "--device", "cpu", "--max-delay-us", "200"] + list(args),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60  # ASan builds start slowly
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail("mlpd serve exited with %d during startup:\n%s"
                            % (proc.returncode, log.read()))
            try:
                with mlpd_client.Client(sock, timeout=5) as c:
                    if c.health().ready:
                        break
            except mlpd_client.MlpdError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("mlpd serve not ready on %s within 60 s" % sock)
            time.sleep(0.02)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        log.close()
    assert rc == 0, "mlpd serve exited with %d after SIGTERM" % rc


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """Path of the socket of a ready `mlpd serve` on the digits model."""
    with running_daemon(tmp_path_factory.mktemp("mlpd")) as sock:
        yield sock


@pytest.fixture
def client(daemon):
    with mlpd_client.Client(daemon, timeout=30) as c:
        yield c

# SPDX-License-Identifier: Apache-2.0
"""Several models in one daemon, as the Python client sees them: the model
argument routes requests, an unknown name is NotFound, ListModels lists
every model, and load/unload change what is served (issue 16)."""
import shutil
import time

import pytest

import mlpd_client
from mlpd_client import Client

from conftest import MODEL, running_daemon

np = pytest.importorskip("numpy")


def wait_state(c, name, state, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        s = {m.name: m for m in c.list_models()}.get(name)
        if s is not None and s.state == state:
            return s
        assert time.monotonic() < deadline, "%s never became %s" % (name,
                                                                   state)
        time.sleep(0.02)


def test_two_models(tmp_path, reference, heldout):
    second = tmp_path / "second.safetensors"
    shutil.copy(str(MODEL), str(second))
    with running_daemon(tmp_path, "--model", "two=%s" % second,
                        "--default-model", "digits") as sock:
        with Client(sock, timeout=30) as c:
            names = [(m.name, m.state, m.ready) for m in c.list_models()]
            assert names == [("digits", "ready", True),
                             ("two", "ready", True)]
            x = heldout[0][:8]
            want = reference(x)
            for model in (None, "digits", "two"):
                got = c.infer(x, model=model).output
                assert np.allclose(got, want, rtol=1e-4, atol=1e-4)
            with pytest.raises(mlpd_client.NotFound) as e:
                c.infer(x, model="nope")
            assert "no model named 'nope'" in e.value.message
            assert c.model_info("two").in_features == 64
            st = c.unload_model("two")
            assert st.name == "two" and st.state == "unloading"
            wait_state(c, "two", "unloaded")
            with pytest.raises(mlpd_client.Unavailable):
                c.infer(x, model="two")
            assert np.allclose(c.infer(x).output, want, rtol=1e-4, atol=1e-4)
            c.load_model("two")
            wait_state(c, "two", "ready")
            got = c.infer(x, model="two").output
            assert np.allclose(got, want, rtol=1e-4, atol=1e-4)

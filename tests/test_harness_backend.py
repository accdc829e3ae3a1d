"""The harness's per-backend parametrization reaches the backend: a ``[CPU-...]`` case compiles on
the CPU backend, not on the INTERPRETER (tests/conftest.py sets harness.DEFAULT_BACKEND from the
test's ``harness_backend`` parameter)."""
import numpy as np
import paddle

import harness
from harness import check_against_paddle


def test_case_runs_on_its_backend(request, monkeypatch):
    used = []
    real_get_backend = harness.get_backend

    def recording_get_backend(name):
        used.append(name)
        return real_get_backend(name)

    monkeypatch.setattr(harness, "get_backend", recording_get_backend)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    check_against_paddle(lambda x: paddle.tanh(x), {"x": x}, ir="pir")
    assert used and set(used) == {request.node.callspec.params["harness_backend"]}

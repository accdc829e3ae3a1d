import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402

import harness  # noqa: E402


def pytest_generate_tests(metafunc):
    """Every test module using the Paddle-comparison harness runs once per backend, from one body."""
    if hasattr(metafunc.module, "check_against_paddle") and "harness_backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("harness_backend")
        metafunc.parametrize("harness_backend", harness.BACKENDS, indirect=True)


@pytest.fixture
def harness_backend(request, monkeypatch):
    skipped = harness.skip_reason(request.param, request.node.name)
    if skipped:
        pytest.skip(skipped)
    monkeypatch.setattr(harness, "DEFAULT_BACKEND", request.param)
    return request.param


@pytest.fixture(params=harness.BACKENDS)
def backend(request):
    """For tests that run a backend themselves (transpile, models)."""
    skipped = harness.skip_reason(request.param, request.node.name)
    if skipped:
        pytest.skip(skipped)
    return request.param


@pytest.fixture
def dynamic_mode():
    """Dygraph mode for one test; the mode before it is restored (other tests build static programs,
    and switching at import would switch every module collected after)."""
    import paddle

    was_static = not paddle.in_dynamic_mode()
    paddle.disable_static()
    yield
    if was_static:
        paddle.enable_static()

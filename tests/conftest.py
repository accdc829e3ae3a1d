import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402

import harness  # noqa: E402
import ranks  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.join(TESTS, "deploy")


def pytest_collection_modifyitems(config, items):
    """tests/deploy is the deploy lane as a whole; the other markers are on the tests themselves."""
    for item in items:
        if str(item.path).startswith(DEPLOY + os.sep):
            item.add_marker(pytest.mark.deploy)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture of the test (module-scoped jobs included): only a test marked
    ``distributed`` may start ranks, so that the fast lane (-m "not distributed") starts none."""
    ranks.ALLOWED_BY = item.nodeid if item.get_closest_marker("distributed") else None


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

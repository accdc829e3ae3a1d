import inspect
import os
import sys
import types

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


# What reaches the backend harness.DEFAULT_BACKEND names.
BACKEND_NAMES = {"check_against_paddle", "run_function", "DEFAULT_BACKEND", "get_backend"}
# Fixtures known not to run a backend; a test using any other fixture is taken to run one.
PLAIN_FIXTURES = {"request", "tmp_path", "tmp_path_factory", "monkeypatch", "capsys", "capfd", "caplog", "recwarn"}


def _names(code: types.CodeType) -> set:
    """The global and attribute names a function's code (and the lambdas and functions in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _runs_a_backend(function, seen: set) -> bool:
    """Whether ``function`` or a function of tests/ it calls uses the harness's backend."""
    names = _names(function.__code__)
    if names & BACKEND_NAMES:
        return True
    for name in names:
        called = function.__globals__.get(name)
        if (inspect.isfunction(called) and called not in seen
                and os.path.abspath(called.__code__.co_filename).startswith(TESTS + os.sep)):
            seen.add(called)
            if _runs_a_backend(called, seen):
                return True
    return False


def pytest_generate_tests(metafunc):
    """Every test module using the Paddle-comparison harness runs once per backend, from one body;
    a test of such a module that never reaches a backend (a conversion refused, the ops of a
    program) runs once: on each backend it would run the same thing twice."""
    if not hasattr(metafunc.module, "check_against_paddle") or "harness_backend" in metafunc.fixturenames:
        return
    parametrized = {name.strip() for marker in metafunc.definition.iter_markers("parametrize")
                    for name in (marker.args[0].split(",") if isinstance(marker.args[0], str) else marker.args[0])}
    other_fixtures = set(metafunc.fixturenames) - parametrized - PLAIN_FIXTURES
    if other_fixtures or _runs_a_backend(metafunc.function, set()):
        metafunc.fixturenames.append("harness_backend")
        metafunc.parametrize("harness_backend", harness.BACKENDS)


@pytest.fixture(autouse=True)
def _harness_backend_selected(request, monkeypatch):
    """The backend pytest_generate_tests gave the test, set as the harness's default. A fixture the
    test only gets through ``metafunc.fixturenames`` never runs (pytest computes the fixture closure
    before that hook): every "CPU" case ran on the INTERPRETER that way. The parameter is read here."""
    callspec = getattr(request.node, "callspec", None)
    backend = callspec.params.get("harness_backend") if callspec is not None else None
    if backend is None:
        return
    skipped = harness.skip_reason(backend, request.node.name)
    if skipped:
        pytest.skip(skipped)
    monkeypatch.setattr(harness, "DEFAULT_BACKEND", backend)


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


@pytest.fixture
def ngraph_logs(caplog):
    """``caplog`` that sees the ``paddle_ngraph`` logger's records once each, whatever ran before:
    that logger stops propagating to the root once it has its own stderr handler
    (log_level.apply_log_level), so caplog's handler is attached to it directly, and propagation
    is off meanwhile. Its level is the configured one (``log_level``; WARNING by default), restored after."""
    import logging

    logger = logging.getLogger("paddle_ngraph")
    propagate, level = logger.propagate, logger.level
    logger.addHandler(caplog.handler)
    logger.propagate = False
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.propagate = propagate
    logger.setLevel(level)  # (not .level =: the logger caches what its level enables)

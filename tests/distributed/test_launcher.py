"""Launcher detection imports nothing of ours; one function (bootstrap.make_transport) chooses
and builds the transport by name, for transpile's default and for fleet alike."""
import ast
import os

import pytest

from paddle_ngraph import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _relative_imports(module: str) -> set:
    tree = ast.parse(open(os.path.join(ROOT, "paddle_ngraph", "distributed", module + ".py")).read())
    return {f"{'.' * n.level}{n.module or ''}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}


def test_launcher_detection_imports_nothing_of_ours_and_transports_do_not_import_bootstrap():
    assert _relative_imports("launcher") == set()
    for module in ("ccl", "mpi", "transport"):
        assert ".bootstrap" not in _relative_imports(module), module
    from paddle_ngraph.distributed import bootstrap, launcher

    assert bootstrap.detect_launcher is launcher.detect_launcher  # re-exported for older imports


@pytest.mark.parametrize("env,name", [
    ({}, "null"),
    ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, "null"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "mpi"),
    ({"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "1"}, "ccl"),
])
def test_auto_transport_follows_the_launcher(env, name):
    from paddle_ngraph.distributed.launcher import detect_launcher

    assert detect_launcher(env).auto_transport() == name


def test_make_transport_refuses_mpi_under_paddles_launcher_and_unknown_names():
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.distributed.launcher import LaunchInfo

    with pytest.raises(ConfigError, match="transport 'mpi' cannot join processes started by paddle"):
        make_transport("mpi", info=LaunchInfo("paddle", 0, 2))
    with pytest.raises(ConfigError, match="unknown transport 'tcp'"):
        make_transport("tcp")
    assert make_transport("auto").name == make_transport(None).name == make_transport("NULL").name

"""paddle_ngraph/version_guard.py: ``import paddle_ngraph`` refuses a Paddle other than the one the
native parts were built against, in one line naming both versions and the rebuild command."""
import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from paddle_ngraph import NgraphError, PaddleVersionError
from paddle_ngraph.quiet import quiet_env
from paddle_ngraph.version_guard import check_paddle_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_equal_or_unknown_versions_pass():
    check_paddle_version("3.3.1", "3.3.1")
    check_paddle_version(None, "3.3.1")   # built by a tree that did not record it
    check_paddle_version("3.3.1", None)   # Paddle not installed: import paddle says so itself


def test_another_version_is_one_line_naming_both_and_the_rebuild():
    with pytest.raises(PaddleVersionError) as info:
        check_paddle_version("3.3.1", "3.2.0")
    assert str(info.value) == ("paddle_ngraph was built against paddlepaddle 3.3.1 but paddlepaddle 3.2.0 is "
                               "installed; rebuild it: make build (or pip install --no-build-isolation -e .)")
    assert isinstance(info.value, NgraphError) and isinstance(info.value, ImportError)


def test_the_build_recorded_the_installed_paddle():
    from paddle_ngraph import _build_info  # written by make build / pip install -e . (setup_native.py)

    assert _build_info.PADDLE_VERSION == metadata.version(_build_info.PADDLE_DISTRIBUTION)


def import_with(tmp_path, site: str):
    """``import paddle_ngraph`` in a fresh process whose sitecustomize runs ``site`` first."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(site))
    path = os.pathsep.join(p for p in (str(tmp_path), ROOT, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", "import paddle_ngraph, sys; print('paddle' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, env=quiet_env(PYTHONPATH=path))


ANOTHER_PADDLE = """
    from importlib import metadata
    real = metadata.version
    metadata.version = lambda name: "2.6.2" if name.startswith("paddlepaddle") else real(name)
"""


def test_import_fails_with_the_message_when_another_paddle_is_installed(tmp_path):
    from paddle_ngraph import _build_info

    proc = import_with(tmp_path, ANOTHER_PADDLE)
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[-1] == (
        f"paddle_ngraph.errors.PaddleVersionError: paddle_ngraph was built against {_build_info.PADDLE_DISTRIBUTION} "
        f"{_build_info.PADDLE_VERSION} but {_build_info.PADDLE_DISTRIBUTION} 2.6.2 is installed; rebuild it: "
        f"make build (or pip install --no-build-isolation -e .)")


def test_import_works_without_build_info_and_does_not_import_paddle(tmp_path):
    proc = import_with(tmp_path, ANOTHER_PADDLE + """
    import sys
    sys.modules["paddle_ngraph._build_info"] = None  # as if built by an older tree: ImportError
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"

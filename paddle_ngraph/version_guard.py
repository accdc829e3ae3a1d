"""The Paddle that paddle_ngraph was built against must be the installed one.

The ``ngraph_engine`` operator and the Cython bridge are compiled against the headers and
``libpaddle.so`` of the Paddle installed at build time; another Paddle (``pip install
paddlepaddle==...`` after the build) would crash in the operator, far from the cause. The build
records that Paddle in ``_build_info.py`` (written by ``setup_native.write_build_info``, not in
git), and ``import paddle_ngraph`` compares it with the installed distribution's version, read
from its metadata: importing Paddle is not allowed here (see fleet/__init__.py).
"""
from __future__ import annotations

from .errors import PaddleVersionError

REBUILD = "make build (or pip install --no-build-isolation -e .)"


def check_paddle_version(built: str | None, installed: str | None, distribution: str = "paddlepaddle") -> None:
    """Raises PaddleVersionError if both versions are known and differ. ``built`` is None for a tree
    built before versions were recorded, ``installed`` None when the distribution is not installed
    (then ``import paddle`` fails by itself, with Paddle's message)."""
    if built is None or installed is None or built == installed:
        return
    raise PaddleVersionError(f"paddle_ngraph was built against {distribution} {built} but {distribution} "
                             f"{installed} is installed; rebuild it: {REBUILD}")


def installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_installed_paddle() -> None:
    """``check_paddle_version`` for this build and this environment; called by ``import paddle_ngraph``."""
    try:
        from . import _build_info
    except ImportError:  # built by a tree that did not record it
        return
    check_paddle_version(_build_info.PADDLE_VERSION, installed_version(_build_info.PADDLE_DISTRIBUTION),
                         _build_info.PADDLE_DISTRIBUTION)

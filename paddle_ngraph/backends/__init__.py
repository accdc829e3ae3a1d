"""Backends: INTERPRETER (NumPy reference) and, when the native library is built, CPU."""
from .base import (Backend, Executable, available_backends, backend_for, default_backend, get_backend,
                   register_backend)
from . import interpreter  # noqa: F401  (registers INTERPRETER)

try:  # registers CPU where the native library (paddle_ngraph._cpu) is built
    from .. import _cpu  # noqa: F401
except ImportError:
    pass
else:
    from . import cpu  # noqa: F401

__all__ = ["Backend", "Executable", "available_backends", "backend_for", "default_backend", "get_backend",
           "register_backend"]

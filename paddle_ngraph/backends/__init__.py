"""Backends: INTERPRETER (NumPy reference) and, when built, CPU (native)."""
from .base import Backend, Executable, available_backends, get_backend, register_backend
from . import interpreter  # noqa: F401  (registers INTERPRETER)

__all__ = ["Backend", "Executable", "available_backends", "get_backend", "register_backend"]

"""The CPU backend: native C++ kernels (oneDNN for the heavy ops) run by a native executor.

Registered as ``CPU`` when the native library is built (``paddle_ngraph._cpu``).
"""
from .executable import CPUBackend, CPUExecutable, default_threads

__all__ = ["CPUBackend", "CPUExecutable", "default_threads"]

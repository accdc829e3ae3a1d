"""The INTERPRETER backend: NumPy reference kernels, the executable definition of each op."""
from .executable import InterpreterBackend, InterpreterExecutable
from .kernels import KERNELS

__all__ = ["InterpreterBackend", "InterpreterExecutable", "KERNELS"]

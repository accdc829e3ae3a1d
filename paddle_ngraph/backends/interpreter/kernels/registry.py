"""The kernel table: each family module registers its kernels with ``@kernel(<op type>, ...)``.

A kernel is ``fn(node, inputs, transport) -> list of outputs`` (NumPy arrays).
"""
from __future__ import annotations

from ....errors import RegistrationError

KERNELS: dict = {}


def kernel(*op_types):
    def decorate(fn):
        for t in op_types:
            if t in KERNELS:
                raise RegistrationError(f"INTERPRETER kernel for IR op {t} registered twice: by "
                                        f"{KERNELS[t].__module__}.{KERNELS[t].__name__} and by {fn.__module__}.{fn.__name__}")
            KERNELS[t] = fn
        return fn
    return decorate


def output_dtype(node, i=0):
    """The NumPy dtype of the node's output ``i``, which a kernel casts its result to."""
    return node.output_types[i].dtype.numpy

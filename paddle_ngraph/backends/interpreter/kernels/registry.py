"""The kernel table: each family module registers its kernels with ``@kernel(<op type>, ...)``.

A kernel is ``fn(node, inputs, transport) -> list of outputs`` (NumPy arrays).
"""
from __future__ import annotations

KERNELS: dict = {}


def kernel(*op_types):
    def decorate(fn):
        for t in op_types:
            if t in KERNELS:
                raise RuntimeError(f"kernel for {t} registered twice")
            KERNELS[t] = fn
        return fn
    return decorate


def output_dtype(node, i=0):
    """The NumPy dtype of the node's output ``i``, which a kernel casts its result to."""
    return node.output_types[i].dtype.numpy

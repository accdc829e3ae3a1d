"""The kernel table shared by the kernel modules."""
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

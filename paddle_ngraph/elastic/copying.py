"""Copies of a commit's arrays spread over threads, started while the commit still collects them.

A commit is bound by memory bandwidth, which one core does not fill: on the 2-vCPU machine of
docs/PERFORMANCE.md one NumPy copy of resnet18's 85 MB of state took 10.3 ms on one thread and
5.1 ms split over two. NumPy releases the GIL while it copies, so plain threads share the work;
as many as the CPU backend would use for this rank (the cores over the ranks of the node), at
most ``MAX_THREADS``, beyond which bandwidth, not cores, is the limit. The copies are handed to
the threads in batches of about ``BATCH_BYTES`` as the commit finds its tensors, so that its own
Python (looking each tensor up in the scope) overlaps the copying.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MAX_THREADS = 4
BATCH_BYTES = 4 << 20
_POOLS: dict = {}
_LOCK = threading.Lock()


try:
    from .._cpu import array_at as _array_at
except ImportError:  # the native library is not built
    _array_at = None
# Paddle's dtypes as a tensor names them, and the NumPy dtype of their bytes (bfloat16: uint16).
_NUMPY = {f"paddle.{name}": np.dtype(name) for name in
          ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")}
_NUMPY["paddle.bfloat16"] = np.dtype(np.uint16)
_BY_DTYPE: dict = {}  # the same, by the dtype objects met so far


def memory_view(address: int, paddle_dtype, shape) -> np.ndarray | None:
    """A NumPy view of a dense CPU tensor's memory (its address, Paddle dtype and shape); None
    where there is none to make (no native library, an unknown dtype, no element)."""
    try:
        dtype = _BY_DTYPE[paddle_dtype]  # hashing a Paddle dtype: 0.5 us; its str(): 2-6 us
    except KeyError:
        dtype = _BY_DTYPE[paddle_dtype] = _NUMPY.get(str(paddle_dtype))
    except TypeError:  # not hashable
        dtype = _NUMPY.get(str(paddle_dtype))
    if _array_at is None or dtype is None or not address:
        return None
    shape = tuple(shape)
    if 0 in shape:
        return None
    return _array_at(address, dtype, shape)


def copy_threads() -> int:
    from ..backends.cpu.executable import default_threads

    return max(1, min(MAX_THREADS, default_threads()))


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pdng-commit-copy")
        return _POOLS[workers]


def _copy_batch(batch):
    for target, source in batch:
        np.copyto(target, source, casting="no")


class CopyStream:
    """``add(target, source)`` for each copy, then ``finish()``: every ``np.copyto(target, source)``
    is done when it returns (errors raised there). On one thread the copies are done at ``add``."""

    def __init__(self, threads: int | None = None):
        self.threads = copy_threads() if threads is None else threads
        self._pool = _pool(self.threads) if self.threads > 1 else None
        self._batch: list = []
        self._bytes = 0
        self._pending: list = []

    def add(self, target: np.ndarray, source: np.ndarray):
        if self._pool is None:
            np.copyto(target, source, casting="no")
            return
        self._batch.append((target, source))
        self._bytes += target.nbytes
        if self._bytes >= BATCH_BYTES:
            self._submit()

    def _submit(self):
        if self._batch:
            self._pending.append(self._pool.submit(_copy_batch, self._batch))
        self._batch, self._bytes = [], 0

    def finish(self):
        self._submit()
        pending, self._pending = self._pending, []
        for done in pending:
            done.result()

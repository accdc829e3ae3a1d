"""One rank of the compressed AllReduce check (started by test_compress.py under mpirun).

For each backend, wire format, reduction and size: an IR function of one AllReduce with
``compress`` over two tensors, run on this rank's inputs; its result must equal, bit for bit,
the scheme computed in one process from all ranks' inputs (compress.expected_result), and the
results of all ranks are gathered and compared bitwise. Exits 1 on a mismatch.
"""
import sys

import numpy as np

from paddle_ngraph._cpu import has_native_mpi
from paddle_ngraph.backends import get_backend
from paddle_ngraph.distributed import make_transport
from paddle_ngraph.distributed.compress import FORMATS, expected_result
from paddle_ngraph.ir import Function, ops

SIZES = [1, 2, 5, 1000, 65537]  # element counts of the bucket; most are not divisible by the ranks


def inputs(rank, n):
    """Gradient-like values over many binades, plus fp16 limits, ties, float32 denormals, NaN, inf."""
    rng = np.random.default_rng(7919 * rank + n)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 12, n))).astype(np.float32)
    special = np.float32([65504, 40000, 1 + 2 ** -8, 1 + 2 ** -11, 2 ** -24, -3e-8, 0.0, 1e-40, -2e-39, np.nan, np.inf,
                          -np.inf, 3e38])
    k = min(n, special.size)
    x[:k] = special[(rank + np.arange(k)) % special.size]
    return x


def bucket_function(n, fmt, reduction):
    first = max(1, n // 3)
    a = ops.Parameter(dtype="float32", shape=(first,), name="a")
    b = ops.Parameter(dtype="float32", shape=(n - first,), name="b")
    reduce = ops.AllReduce(a.output(), b.output(), reduction=reduction, compress=fmt, bucket="bucket", name="ar")
    return Function([a, b], {"a": reduce.output(0), "b": reduce.output(1)}, name="compressed"), first


def main():
    transport = make_transport(None)
    rank, size = transport.rank, transport.size
    failures = []
    # Counts the reference path's calls: the CPU backend over MPI must take its native path instead.
    python_calls = []
    reference = transport.allreduce_compressed
    transport.allreduce_compressed = lambda *a, **k: python_calls.append(1) or reference(*a, **k)
    for backend in ("INTERPRETER", "CPU"):
        for fmt in FORMATS:
            calls_before = len(python_calls)
            for reduction in ("avg", "sum"):
                for n in SIZES:
                    if n < 2:
                        n = 2  # two tensors in the bucket
                    function, first = bucket_function(n, fmt, reduction)
                    x = inputs(rank, n)
                    out = get_backend(backend).compile(function).call([x[:first], x[first:]], transport=transport)
                    got = np.concatenate([np.asarray(o).reshape(-1) for o in out]).view(np.uint32)
                    want = expected_result(np.stack([inputs(r, n) for r in range(size)]), fmt, reduction)
                    every = transport.allgather_object(got.tobytes())
                    label = f"{backend} {fmt} {reduction} n={n}"
                    if not np.array_equal(got, want.view(np.uint32)):
                        bad = np.nonzero(got != want.view(np.uint32))[0]
                        failures.append(f"{label}: {bad.size} elements differ from the model, first {bad[:3]}")
                    if any(e != every[0] for e in every):
                        failures.append(f"{label}: the ranks' results differ")
            native = backend == "CPU" and transport.name == "MPI" and has_native_mpi()
            if native and len(python_calls) != calls_before:
                failures.append(f"{backend} {fmt}: the native MPI path was not taken")
            if not native and len(python_calls) == calls_before:
                failures.append(f"{backend} {fmt}: the reference path was not taken")
    for f in failures:
        print(f"[rank {rank}] MISMATCH {f}", flush=True)
    if not failures:
        print(f"[rank {rank}] compressed allreduce: bitwise equal to the model on every rank", flush=True)
    transport.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The CPU backend's native AllReduce (one compiled bucket, as training runs it) against NumPy on
this rank; exits 1 on a mismatch. Run under mpirun (the MPI transport, or PDNG_TEST_TRANSPORT=ccl)
or paddle.distributed.launch (the ccl transport).

Buckets of one input (reduced from the input into the bucket's region) and of two (packed into the
region, then reduced in place); every dtype and reduction of the native path; sizes that do and do not
fill the shared-memory path's 64 KB chunks. Integer-valued data make every reduction exact in any
order; random float32 data must give the same bits on every rank, and on 2 ranks the bits of a + b.

PDNG_TEST_SHM_OFF_RANK=k: rank k alone turns the path off (transport.shared_memory = False, what
config key shm_allreduce sets at transpile); every rank must then use the transport's own AllReduce. Prints the communicator's description, for the test to check.

--kill: after one AllReduce, rank 1 kills itself (SIGKILL) and the others enter the next one; they
must fail naming it, not hang. SIGTERM is ignored, so that they report before mpirun stops them.
"""
import os
import signal
import sys
import time

import numpy as np

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()

REDUCTIONS = ("sum", "avg", "prod", "min", "max")
DTYPES = ("float32", "float64", "int32", "int64")
SIZES = (1, 7, 1000, 16385, 100003)


def values(rank, n, dtype, reduction, salt=0):
    rng = np.random.default_rng(1000 * rank + n + salt)
    low, high = (1, 3) if reduction == "prod" else (-8, 9)
    return rng.integers(low, high, n).astype(dtype)


def expected(size, n, dtype, reduction, salt=0):
    data = np.stack([values(r, n, dtype, reduction, salt).astype(np.float64) for r in range(size)])
    fn = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[reduction]
    out = fn(data, axis=0)
    return out / size if reduction == "avg" else out


def compile_bucket(shapes, dtype, reduction):
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.ir import Function, ops

    params = [ops.Parameter(dtype=dtype, shape=shape, name=f"g{k}") for k, shape in enumerate(shapes)]
    reduce = ops.AllReduce(*[p.output() for p in params], reduction=reduction)
    function = Function(params, {f"r{k}": reduce.output(k) for k in range(len(shapes))})
    return get_backend("CPU").compile(function)


def compile_sharded(kind, shape, dtype, reduction, size):
    """ZeRO-1's pair on a tensor computed here (x + x): in the arena, so in shared memory."""
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.ir import Function, ops

    x = ops.Parameter(dtype=dtype, shape=shape, name="x")
    doubled = ops.Add(x.output(), x.output())
    if kind == "ReduceScatter":
        node = ops.ReduceScatter(doubled.output(), world_size=size, reduction=reduction)
    else:
        node = ops.AllGather(doubled.output(), world_size=size)
    return get_backend("CPU").compile(Function([x], {"out": node.output(0)}))


def check_sharded(t, failures):
    """ReduceScatter and AllGather against NumPy, at shards inside and across the 64 KB chunks."""
    for dtype in DTYPES:
        for reduction in REDUCTIONS:
            if reduction == "avg" and dtype.startswith("int"):
                continue
            for rows, cols in ((1, 1), (7, 1), (3, 5), (16385, 1), (40000, 1)):
                n = rows * cols
                exe = compile_sharded("ReduceScatter", (rows * t.size, cols), dtype, reduction, t.size)
                x = values(t.rank, n * t.size, dtype, reduction).reshape(rows * t.size, cols)
                data = np.stack([2 * values(r, n * t.size, dtype, reduction).astype(np.float64) for r in range(t.size)])
                fn = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[reduction]
                want = fn(data, axis=0) / (t.size if reduction == "avg" else 1)
                want = want.reshape(rows * t.size, cols)[t.rank * rows:(t.rank + 1) * rows]
                for repeat in range(2):
                    got = exe.call([x], t)[0]
                    if got.dtype != np.dtype(dtype) or not np.allclose(got, want, rtol=1e-6):
                        failures.append(f"ReduceScatter {dtype} {reduction} ({rows}, {cols}) (call {repeat + 1})")
        for rows in (1, 7, 16385, 40000):
            exe = compile_sharded("AllGather", (rows, 2), dtype, "sum", t.size)
            x = values(t.rank, 2 * rows, dtype, "sum").reshape(rows, 2)
            want = np.concatenate([2 * values(r, 2 * rows, dtype, "sum").reshape(rows, 2) for r in range(t.size)])
            got = exe.call([x], t)[0]
            if got.dtype != np.dtype(dtype) or not np.array_equal(got, want):
                failures.append(f"AllGather {dtype} ({rows}, 2)")


def kill_rank_1(t):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exe = compile_bucket([(1000,)], "float32", "sum")
    exe.call([np.ones(1000, np.float32)], t)
    if t.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        exe.call([np.ones(1000, np.float32)], t)
    except Exception as e:  # noqa: BLE001 - what the user would see, printed for the test
        print(f"[rank {t.rank}] after {time.monotonic() - start:.2f} s: {type(e).__name__}: {e}", flush=True)
        return 3
    print(f"[rank {t.rank}] FAILED: the AllReduce ended without rank 1", flush=True)
    return 1


def main():
    from paddle_ngraph.distributed import make_transport

    t = make_transport(os.environ.get("PDNG_TEST_TRANSPORT") or None)
    if os.environ.get("PDNG_TEST_SHM_OFF_RANK") == str(t.rank):
        t.shared_memory = False
    if "--kill" in sys.argv:
        return kill_rank_1(t)
    failures = []
    description = None
    for dtype in DTYPES:
        for reduction in REDUCTIONS:
            if reduction == "avg" and dtype.startswith("int"):
                continue  # the Python transport's (floor division), not the native path
            for n in SIZES:
                for shapes in ([(n,)], [(n,), (3, 5)]):
                    exe = compile_bucket(shapes, dtype, reduction)
                    inputs = [values(t.rank, int(np.prod(s)), dtype, reduction, salt=k).reshape(s)
                              for k, s in enumerate(shapes)]
                    for repeat in range(2):  # again on the same executable: the counters go on
                        got = exe.call(inputs, t)
                        for k, s in enumerate(shapes):
                            want = expected(t.size, int(np.prod(s)), dtype, reduction, salt=k).reshape(s)
                            if got[k].dtype != np.dtype(dtype) or not np.allclose(got[k], want, rtol=1e-6):
                                failures.append(f"{dtype} {reduction} {shapes} output {k} (call {repeat + 1})")
                    description = exe.communicator if description is None else description
    if t.size > 1:
        check_sharded(t, failures)
    # Inexact sums: the same bits on every rank; on 2 ranks, those of a + b in float32.
    noisy = [np.random.default_rng(r).standard_normal(70001).astype(np.float32) for r in range(t.size)]
    exe = compile_bucket([(70001,)], "float32", "avg")
    got = exe.call([noisy[t.rank]], t)[0]
    if len({a.tobytes() for a in t.allgather_object(got)}) != 1:
        failures.append("float32 avg differs between ranks")
    if t.size == 2 and not np.array_equal(got, (noisy[0] + noisy[1]) / np.float32(2)):
        failures.append("float32 avg of 2 ranks is not (a + b) / 2")
    t.barrier()
    from paddle_ngraph._cpu import shared_memory_collectives

    print(f"[rank {t.rank}] communicator: {description}", flush=True)
    print(f"[rank {t.rank}] over shared memory: {shared_memory_collectives()}", flush=True)
    if failures:
        print(f"[rank {t.rank}] FAILED: " + "; ".join(failures[:10]), flush=True)
        return 1
    print(f"[rank {t.rank}] native allreduce matches NumPy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Checks every collective of the MPI transport against NumPy on this rank; exits 1 on a mismatch.

Data are small integers stored in each dtype, so that sums, products, minima and
maxima are exact in any order of reduction and the expected value is exact too.

PDNG_TEST_HIERARCHICAL=auto|on|off chooses the allreduce (set_hierarchical), with
PDNG_TEST_RANKS_PER_NODE=k making ranks r of the same r // k one "node"
(PADDLE_NGRAPH_NODE_ID); PDNG_TEST_EXPECT_HIERARCHICAL=0|1 is what the choice must be.
"""
import os
import sys

import numpy as np

from paddle_ngraph.distributed import make_transport
from paddle_ngraph.distributed.mpi import _bf16_to_f32, _f32_to_bf16
from paddle_ngraph.distributed.transport import DTYPES
from paddle_ngraph.errors import TransportError
from paddle_ngraph.ir.ops.collective import REDUCTIONS

SIZES = [1, 2, 3, 7, 1000, 65537]  # includes sizes not divisible by the rank count
BIG = 16 << 20                     # 64 MB of float32


def values(rank, n, dtype, reduction):
    rng = np.random.default_rng(1000 * rank + n)
    low, high = (1, 3) if reduction == "prod" else (-8, 9)
    ints = rng.integers(low, high, n)
    if dtype == "bfloat16":
        return _f32_to_bf16(ints.astype(np.float32))
    return ints.astype(dtype)


def as_float(a, dtype):
    return _bf16_to_f32(a).astype(np.float64) if dtype == "bfloat16" else a.astype(np.float64)


def expected(size, n, dtype, reduction):
    data = np.stack([as_float(values(r, n, dtype, reduction), dtype) for r in range(size)])
    fn = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[reduction]
    out = fn(data, axis=0)
    if reduction == "avg":
        out = np.floor_divide(out, size) if dtype in ("int32", "int64") else out / size
    return out


def set_up_nodes():
    per_node = os.environ.get("PDNG_TEST_RANKS_PER_NODE")
    if per_node:
        os.environ["PADDLE_NGRAPH_NODE_ID"] = str(int(os.environ["OMPI_COMM_WORLD_RANK"]) // int(per_node))


def main():
    set_up_nodes()
    t = make_transport(os.environ.get("PDNG_TEST_TRANSPORT") or None)
    failures = []
    mode = os.environ.get("PDNG_TEST_HIERARCHICAL")
    if mode:
        chosen = t.set_hierarchical(mode)
        want = os.environ.get("PDNG_TEST_EXPECT_HIERARCHICAL")
        if want is not None and chosen != bool(int(want)):
            failures.append(f"set_hierarchical({mode!r}) chose {chosen}, expected {bool(int(want))}")
        print(f"[rank {t.rank}] hierarchical={chosen}", flush=True)
    for dtype in DTYPES:
        for reduction in REDUCTIONS:
            for n in SIZES:
                got = t.allreduce(values(t.rank, n, dtype, reduction), reduction, name=f"t{n}",
                                  bfloat16=dtype == "bfloat16")
                want = expected(t.size, n, dtype, reduction)
                tol = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-6}.get(dtype, 1e-12)
                if got.shape != (n,) or not np.allclose(as_float(got, dtype), want, rtol=tol, atol=0):
                    failures.append(f"allreduce {dtype} {reduction} n={n}")
    big = np.full(BIG, t.rank + 1, dtype=np.float32)
    if not np.all(t.allreduce(big, "sum") == t.size * (t.size + 1) / 2):
        failures.append("allreduce 64 MB float32 sum")
    bucket = [np.full((3, 5), t.rank, np.float32), np.full(7, 2 * t.rank, np.float32)]
    fused = t.allreduce_many(bucket, "avg")
    mean_rank = (t.size - 1) / 2
    if fused[0].shape != (3, 5) or not np.allclose(fused[0], mean_rank) or not np.allclose(fused[1], 2 * mean_rank):
        failures.append("allreduce_many avg")
    # Inexact float sums (the order of reduction matters): still the same bits on every rank.
    noisy = t.allreduce(np.random.default_rng(t.rank).standard_normal(4099).astype(np.float32), "avg")
    if len({a.tobytes() for a in t.allgather_object(noisy)}) != 1:
        failures.append("avg of random float32 differs between ranks")
    root_data = np.arange(10, dtype=np.int64) * (7 if t.rank == 0 else 0)
    if not np.array_equal(t.broadcast(root_data, 0), np.arange(10) * 7):
        failures.append("broadcast")
    gathered = t.allgather(np.full((2, 3), t.rank, np.float64))
    if gathered.shape != (2 * t.size, 3) or not np.array_equal(gathered[::2, 0], np.arange(t.size)):
        failures.append("allgather")
    into = np.empty((2 * t.size, 3), np.float64)
    if t.allgather(np.full((2, 3), t.rank, np.float64), out=into) is not into or not np.array_equal(into, gathered):
        failures.append("allgather into out")
    try:
        t.allgather(np.zeros((2, 3), np.float64), out=np.empty((2 * t.size, 3), np.float32))
        failures.append("allgather into an out of the wrong dtype did not raise")
    except TransportError:
        pass
    chunk = t.reduce_scatter(np.arange(4 * t.size, dtype=np.float32), "sum")
    if not np.array_equal(chunk, t.size * np.arange(4 * t.rank, 4 * t.rank + 4, dtype=np.float32)):
        failures.append("reduce_scatter")
    # avg: the matching slice of an allreduce avg; the same bits on 2 ranks (a + b is a + b), within
    # rounding beyond (oneCCL sums 3 ranks in another order in its reduce-scatter than its allreduce).
    local = np.random.default_rng(t.rank).standard_normal((3 * t.size, 2)).astype(np.float32)
    mine = t.reduce_scatter(local, "avg")
    slice_of_all = t.allreduce(local, "avg")[3 * t.rank:3 * t.rank + 3]
    if mine.shape != (3, 2) or not (np.array_equal(mine, slice_of_all) if t.size <= 2 else
                                    np.allclose(mine, slice_of_all, rtol=1e-6, atol=1e-7)):
        failures.append("reduce_scatter avg")
    if t.size > 1:
        if t.rank == 0:
            t.send(np.arange(5, dtype=np.int32), peer=1, tag=3)
        elif t.rank == 1:
            buf = np.zeros(5, np.int32)
            t.recv(buf, peer=0, tag=3)
            if not np.array_equal(buf, np.arange(5)):
                failures.append("send/recv")
    t.barrier()
    if failures:
        print(f"[rank {t.rank}] FAILED: " + "; ".join(failures), flush=True)
        return 1
    print(f"[rank {t.rank}] all collectives match NumPy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

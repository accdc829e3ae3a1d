#!/usr/bin/env python
"""Allreduce micro-benchmark: the CPU backend's native path, the ccl and MPI transports, raw mpi4py.

Run under mpirun (the ccl transport bootstraps over MPI there):
  mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_allreduce.py
Prints, per system and message size, the median time of --repeats float32 sum
allreduces and the bus bandwidth 2(n-1)/n * bytes / time (the ring algorithm's
traffic per rank, the figure NCCL's and Horovod's benchmarks report).

Systems: ``native`` is what training uses: a one-node function (an AllReduce bucket) run
by the CPU backend, reduced in place from C++ on its communication thread (MPI_Allreduce);
``mpi`` and ``ccl`` the Python transports; ``mpi4py`` a bare comm.Allreduce.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("GLOG_minloglevel", "2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-bytes", type=int, default=4 << 10, help="smallest message (default 4 KB)")
    p.add_argument("--max-bytes", type=int, default=64 << 20, help="largest message (default 64 MB)")
    p.add_argument("--repeats", type=int, default=10, help="timed repetitions per size (default 10)")
    p.add_argument("--systems", default="native,ccl,mpi,mpi4py", help="comma-separated: native, ccl, mpi, mpi4py")
    p.add_argument("--json", default=None, help="also write the results to this JSON file (rank 0)")
    return p.parse_args(argv)


def timed(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def native_allreduce(data, transport):
    """One AllReduce bucket compiled by the CPU backend: what a training step runs."""
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.ir import Function, ops

    x = ops.Parameter(dtype="float32", shape=data.shape, name="grad")
    function = Function([x], {"reduced": ops.AllReduce(x.output(), reduction="sum").output(0)})
    executable = get_backend("CPU").compile(function)
    return lambda: executable.call([data], transport)


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    from paddle_ngraph.distributed import detect_launcher
    from paddle_ngraph.distributed.mpi import MpiTransport, import_mpi

    if detect_launcher().launcher != "mpirun":
        print("run this under mpirun (see --help)", file=sys.stderr)
        return 2
    MPI = import_mpi()
    comm = MPI.COMM_WORLD
    systems = {}
    for name in args.systems.split(","):
        if name == "mpi":
            systems["mpi"] = MpiTransport()
        elif name == "ccl":
            from paddle_ngraph.distributed.ccl import CclTransport, available

            if available():
                systems["ccl"] = CclTransport()
            elif comm.rank == 0:
                print("ccl: not built, skipped", flush=True)
        elif name == "mpi4py":
            systems["mpi4py"] = None
        elif name == "native":
            systems["native"] = "native"
    native_transport = MpiTransport() if "native" in systems else None
    n = comm.size
    sizes = []
    size = args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 4
    results = []
    if comm.rank == 0:
        print(f"{'system':8s} {'bytes':>10s} {'median ms':>10s} {'bus GB/s':>9s}   ({n} ranks)", flush=True)
    for nbytes in sizes:
        data = np.ones(nbytes // 4, dtype=np.float32)
        out = np.empty_like(data)
        for name, transport in systems.items():
            if transport is None:
                fn = lambda: comm.Allreduce(data, out, op=MPI.SUM)  # noqa: E731
            elif transport == "native":
                fn = native_allreduce(data, native_transport)
            else:
                fn = lambda t=transport: t.allreduce(data, "sum")  # noqa: E731
            comm.Barrier()
            seconds = comm.allreduce(timed(fn, args.repeats), op=MPI.MAX)
            bus = 2 * (n - 1) / n * nbytes / seconds / 1e9
            results.append({"system": name, "bytes": nbytes, "ms": seconds * 1e3, "bus_GBps": bus, "ranks": n})
            if comm.rank == 0:
                print(f"{name:8s} {nbytes:10d} {seconds * 1e3:10.3f} {bus:9.2f}", flush=True)
    if comm.rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

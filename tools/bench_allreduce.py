#!/usr/bin/env python
"""Allreduce micro-benchmark: the CPU backend's native path, the ccl and MPI transports, raw mpi4py.

Run under mpirun (the ccl transport bootstraps over MPI there):
  mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_allreduce.py
Prints, per system and message size, the median time of a float32 sum allreduce and the bus
bandwidth 2(n-1)/n * bytes / time (the ring algorithm's traffic per rank, the figure NCCL's and
Horovod's benchmarks report). The systems are interleaved: each of --rounds rounds times a block of
calls of every system in turn (after a barrier; the slowest rank's time counts), so a system is
never measured in a quieter minute than the others; the median is over rounds, and the spread
(min-max over rounds, in ms) is printed next to it. The machine is shared: compare the rows of one run.

Systems: ``native`` is what training uses: a one-node function (an AllReduce bucket) run
by the CPU backend, reduced in place from C++ (over shared memory among the ranks of one node, or
MPI_Allreduce with --shm off; the input is copied into the bucket's region first on the former);
``mpi`` and ``ccl`` the Python transports; ``mpi4py`` a bare comm.Allreduce.
``native-bf16`` and ``native-fp16`` are the native path with ``compress`` (16-bit values on the wire,
MPI_Alltoall + float32 sum + MPI_Allgather), ``mpi-bf16``/``mpi-fp16`` the same scheme in the
NumPy reference over the MPI transport. Their bus bandwidth counts the float32 bytes reduced (the
gradient the step needs), so it compares with the float32 rows as time does; ``wire MB`` is what
each rank sends: 2(n-1)/n * bytes for float32 (ring), half that for the 16-bit rows.
"""
import argparse
import json
import sys
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-bytes", type=int, default=4 << 10, help="smallest message (default 4 KB)")
    p.add_argument("--max-bytes", type=int, default=64 << 20, help="largest message (default 64 MB)")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per system and size (default 10), "
                   "spread over the rounds")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size (default 5)")
    p.add_argument("--systems", default="native,ccl,mpi,mpi4py", help="comma-separated: native, ccl, mpi, mpi4py, "
                   "native-bf16, native-fp16, mpi-bf16, mpi-fp16")
    p.add_argument("--shm", choices=("on", "off"), default="on",
                   help="the native rows over shared memory within the node (on, the default, as training "
                        "runs them: config key shm_allreduce) or with MPI_Allreduce (off)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file (rank 0)")
    return p.parse_args(argv)


def time_block(fn, calls, comm, MPI):
    """Seconds per call of one block of ``calls`` calls, the slowest rank's (a barrier first)."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return comm.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)


def native_allreduce(data, transport, compress="none"):
    """One AllReduce bucket compiled by the CPU backend: what a training step runs."""
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.ir import Function, ops

    x = ops.Parameter(dtype="float32", shape=data.shape, name="grad")
    reduce = ops.AllReduce(x.output(), reduction="sum", compress=compress)
    function = Function([x], {"reduced": reduce.output(0)})
    executable = get_backend("CPU").compile(function)
    call = lambda: executable.call([data], transport)  # noqa: E731
    call.executable = executable
    return call


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
        elif name in ("native", "native-bf16", "native-fp16"):
            systems[name] = "native"
        elif name in ("mpi-bf16", "mpi-fp16"):
            systems[name] = "compressed"
        else:
            print(f"unknown system '{name}'", file=sys.stderr)
            return 2
    native_transport = MpiTransport() if any(t in ("native", "compressed") for t in systems.values()) else None
    if native_transport is not None:
        native_transport.shared_memory = args.shm == "on"
    n = comm.size
    sizes = []
    size = args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 4
    results = []
    if comm.rank == 0:
        print(f"{'system':11s} {'bytes':>10s} {'median ms':>10s} {'bus GB/s':>9s} {'wire MB':>8s}   spread ms ({n} ranks)",
              flush=True)
    rounds = max(1, args.rounds)
    calls = max(1, args.repeats // rounds)
    for bytes_index, nbytes in enumerate(sizes):
        data = np.ones(nbytes // 4, dtype=np.float32)
        out = np.empty_like(data)
        calls_of = {}
        described = bytes_index > 0
        for name, transport in systems.items():
            if transport is None:
                fn = lambda: comm.Allreduce(data, out, op=MPI.SUM)  # noqa: E731
            elif transport == "native":
                fn = native_allreduce(data, native_transport, name.partition("-")[2] or "none")
            elif transport == "compressed":
                fmt = name.partition("-")[2]
                fn = lambda f=fmt: native_transport.allreduce_compressed([data], "sum", f)  # noqa: E731
            else:
                fn = lambda t=transport: t.allreduce(data, "sum")  # noqa: E731
            fn()  # warm-up: buffers touched, communicators and plans built
            if comm.rank == 0 and transport == "native" and not described:
                print(f"native: {fn.executable.communicator}", flush=True)
                described = True
            calls_of[name] = fn
        per_round = {name: [] for name in calls_of}
        for _ in range(rounds):
            for name, fn in calls_of.items():
                per_round[name].append(time_block(fn, calls, comm, MPI))
        for name, times in per_round.items():
            seconds = float(np.median(times))
            bus = 2 * (n - 1) / n * nbytes / seconds / 1e9
            wire = 2 * (n - 1) / n * nbytes / (2 if name.endswith(("bf16", "fp16")) else 1)
            spread = [min(times) * 1e3, max(times) * 1e3]
            results.append({"system": name, "bytes": nbytes, "ms": seconds * 1e3, "ms_spread": spread, "bus_GBps": bus,
                            "ranks": n, "wire_bytes_per_rank": wire})
            if comm.rank == 0:
                print(f"{name:11s} {nbytes:10d} {seconds * 1e3:10.3f} {bus:9.2f} {wire / 1e6:8.2f}   "
                      f"{spread[0]:.3f}-{spread[1]:.3f}", flush=True)
    if comm.rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

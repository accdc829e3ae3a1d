#!/usr/bin/env python
"""What a collective over a group of ranks costs on the CPU backend (docs/model-parallel.md).

Run under mpirun with 2 ranks (one group of both):
  mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_group_allreduce.py [--transport ccl]
Times one float32 sum AllReduce compiled by the CPU backend, once of the whole job (``group ()``:
the native path, over shared memory on one node) and once named by its group ``(0, 1)`` (the same
ranks: with --transport mpi flat MPI_Allreduce from C++ over the group's communicator, with ccl
through the transport's group object in Python, on the communication thread). The two are interleaved:
each of --rounds rounds times a block of calls of both in turn after a barrier; the median over
rounds is printed with the spread (min-max). The machine is shared: compare the rows of one run.
"""
import argparse
import statistics
import time

import numpy as np

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()

from paddle_ngraph.backends import get_backend  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from paddle_ngraph.ir import Function, ops  # noqa: E402

SIZES_KB = (4, 1024, 16384)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transport", default="mpi", choices=("mpi", "ccl"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    transport = make_transport(args.transport)
    if transport.size != 2:
        raise SystemExit("run with 2 ranks (mpirun -np 2)")
    transport.make_groups([(0, 1)])
    if transport.rank == 0:
        print(f"{'size':>9}  {'native (us)':>22}  {'via group (us)':>22}  ratio")
    for kb in SIZES_KB:
        n = kb * 256
        x = ops.Parameter(dtype="float32", shape=(n,), name="x")
        compiled = {}
        for label, group in (("native", ()), ("group", (0, 1))):
            reduced = ops.AllReduce(x.output(), reduction="sum", group=group).output(0)
            compiled[label] = get_backend("CPU").compile(Function([x], {"y": reduced}))
        data = np.ones(n, np.float32)
        calls = 100 if kb < 1024 else 10
        times = {label: [] for label in compiled}
        for label, executable in compiled.items():  # warm-up: specialization, buffers, groups
            for _ in range(3):
                executable.call([data], transport)
        for _ in range(args.rounds):
            for label, executable in compiled.items():
                transport.barrier()
                start = time.perf_counter()
                for _ in range(calls):
                    executable.call([data], transport)
                elapsed = np.array([(time.perf_counter() - start) / calls * 1e6])
                times[label].append(float(transport.allreduce(elapsed, "max")[0]))  # the slowest rank's
        if transport.rank == 0:
            cells = [f"{statistics.median(t):8.1f} ({min(t):.0f}-{max(t):.0f})" for t in times.values()]
            ratio = statistics.median(times["group"]) / statistics.median(times["native"])
            print(f"{kb:>6} KB  {cells[0]:>22}  {cells[1]:>22}  {ratio:5.2f}", flush=True)
    transport.close()


if __name__ == "__main__":
    main()

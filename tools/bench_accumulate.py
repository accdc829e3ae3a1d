#!/usr/bin/env python
"""What gradient accumulation pays: throughput and allreduce share at accumulate_steps k, in one run.

    mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_accumulate.py --model mnist_mlp
    python tools/bench_accumulate.py --ks 1,4                      # one process (no allreduce)

Each rank transpiles one copy of the program per k and runs them in alternating short rounds (the
order reversed every round), so that every k sees the same machine load (the machine may be shared).
A step is one optimizer update: k exe.run calls on micro-batches of --batch-size. Reported on rank 0,
per k: median ms per update, samples/s over all ranks, the share of the time the communication
thread spent in collectives ("comm") and the share the steps were blocked waiting for them ("wait",
what overlap did not hide; CPU backend), and samples/s relative to k=1. tools/bench.py
--accumulate-steps 1,2,4 gives the same figures from separate runs, next to the other systems.
"""
import argparse
import statistics
import sys
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mnist_mlp")
    p.add_argument("--backend", default="CPU")
    p.add_argument("--ks", default="1,2,4", help="accumulate_steps values (default 1,2,4)")
    p.add_argument("--batch-size", type=int, default=128, help="per-rank micro-batch (default 128)")
    p.add_argument("--steps", type=int, default=3, help="updates per round (default 3)")
    p.add_argument("--rounds", type=int, default=20, help="alternating rounds (default 20)")
    args = p.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",") if k]

    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.transpiler import engines
    from paddle_ngraph.zoo import build_program
    from paddle_ngraph.zoo.models import make_batch

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    programs = {}
    for k in ks:
        main_prog, startup, _, loss = build_program(args.model, "sgd")
        exe.run(startup)
        paddle_ngraph.transpile(main_prog, backend=args.backend, accumulate_steps=k)
        programs[k] = (main_prog, loss, engines()[-1])
    transport = programs[ks[0]][2].transport
    rng = np.random.default_rng(transport.rank)
    feeds = [make_batch(args.model, args.batch_size, rng) for _ in range(4)]

    def update(k):
        prog, loss, _ = programs[k]
        for j in range(k):
            exe.run(prog, feed=feeds[j % 4], fetch_list=[loss])

    for k in ks:  # warm-up: compilation of both variants, start-up sync
        for _ in range(2):
            update(k)
    times = {k: [] for k in ks}
    for _, _, engine in programs.values():
        engine.comm_seconds = engine.wait_seconds = 0.0
    order = list(ks)
    for _ in range(args.rounds):
        order.reverse()
        for k in order:
            for _ in range(args.steps):
                start = time.perf_counter()
                update(k)
                times[k].append(time.perf_counter() - start)
    rows = []
    for k in ks:
        engine = programs[k][2]
        ms = statistics.median(times[k]) * 1e3
        total = sum(times[k])
        rows.append((k, ms, transport.size * args.batch_size * k * 1e3 / ms,
                     engine.comm_seconds / total, engine.wait_seconds / total))
    if transport.rank == 0:
        print(f"{args.model} {args.backend} {transport.size} rank(s), micro-batch {args.batch_size}/rank, "
              f"{args.rounds} rounds x {args.steps} updates per k")
        print(f"{'k':>3s} {'ms/update':>10s} {'samples/s':>10s} {'comm':>6s} {'wait':>6s} {'vs k=1':>7s}")
        base = rows[0][2]
        for k, ms, sps, comm, wait in rows:
            print(f"{k:3d} {ms:10.2f} {sps:10.0f} {100 * comm:5.1f}% {100 * wait:5.1f}% {sps / base:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

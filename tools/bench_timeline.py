#!/usr/bin/env python
"""The cost of PADDLE_NGRAPH_TIMELINE: step time with the timeline on against off, in one run.

    mpirun -np 2 --allow-run-as-root --oversubscribe python tools/bench_timeline.py --model mnist_mlp
    python tools/bench_timeline.py --steps 100          # one process

Each rank transpiles two copies of the same program, the first with the variable unset, the second
with it set (it is read at transpile), and runs them in alternating short rounds of --steps steps, so
that both see the same machine load (the machine may be shared). Reported on rank 0: median ms/step of each and their ratio.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mnist_mlp")
    p.add_argument("--backend", default="CPU")
    p.add_argument("--batch-size", type=int, default=64, help="per-rank batch (default 64)")
    p.add_argument("--steps", type=int, default=5, help="steps per round (default 5)")
    p.add_argument("--rounds", type=int, default=60, help="alternating rounds (default 60)")
    args = p.parse_args(argv)

    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.transpiler import engines
    from paddle_ngraph.zoo import build_program
    from paddle_ngraph.zoo.models import make_batch

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    os.environ.pop("PADDLE_NGRAPH_TIMELINE", None)
    programs = {}
    for label in ("off", "on"):
        if label == "on":
            os.environ["PADDLE_NGRAPH_TIMELINE"] = os.path.join(tempfile.mkdtemp(), "bench_timeline.json")
        main_prog, startup, _, loss = build_program(args.model, "sgd")
        exe.run(startup)
        paddle_ngraph.transpile(main_prog, backend=args.backend)
        programs[label] = (main_prog, loss, engines()[-1])
    transport = programs["on"][2].transport
    feed = make_batch(args.model, args.batch_size, np.random.default_rng(transport.rank))
    times = {"off": [], "on": []}
    for label, (prog, loss, _) in programs.items():  # warm-up: compilation, start-up sync
        for _ in range(3):
            exe.run(prog, feed=feed, fetch_list=[loss])
    order = list(programs.items())
    for _ in range(args.rounds):
        order.reverse()  # on, off, off, on, ...: neither always runs right after the other
        for label, (prog, loss, _) in order:
            for _ in range(args.steps):
                start = time.perf_counter()
                exe.run(prog, feed=feed, fetch_list=[loss])
                times[label].append(time.perf_counter() - start)
    off, on = statistics.median(times["off"]) * 1e3, statistics.median(times["on"]) * 1e3
    if transport.rank == 0:
        print(f"{args.model} {args.backend} {transport.size} rank(s), batch {args.batch_size}/rank, "
              f"{args.rounds}x{args.steps} steps each: timeline off {off:.3f} ms/step, on {on:.3f} ms/step, "
              f"on/off {on / off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

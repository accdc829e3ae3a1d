#!/usr/bin/env python
"""Trains dist_mnist_mlp (784-600-10, SGD) data-parallel with paddle_ngraph.

Run on one process, or on N ranks with mpirun:
  python tools/train_mnist.py --steps 100
  mpirun -np 2 --allow-run-as-root --oversubscribe python tools/train_mnist.py
Each rank feeds its own shard of every global batch (per-rank batch --batch-size).
Without --data, trains on scikit-learn's bundled handwritten digits laid out as
MNIST; with --data DIR, on the MNIST IDX files in DIR.
"""
import argparse
import sys
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--batch-size", type=int, default=128, help="per-rank batch size (default 128)")
    p.add_argument("--lr", type=float, default=0.03, help="learning rate (default 0.03)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"])
    p.add_argument("--backend", default="INTERPRETER", help="paddle_ngraph backend (default INTERPRETER)")
    p.add_argument("--data", default=None, help="directory with MNIST IDX files (default: bundled digits)")
    p.add_argument("--log-every", type=int, default=20, help="print every N steps (default 20)")
    p.add_argument("--legacy", action="store_true", help="build a legacy ProgramDesc program instead of PIR")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.zoo import build_program, shard
    from paddle_ngraph.zoo.data import default_data

    paddle.enable_static()
    transport = make_transport()
    rank, nranks = transport.rank, transport.size
    x, y = default_data(args.data)
    guard = paddle.pir_utils.OldIrGuard() if args.legacy else paddle.pir_utils.IrGuard()
    with guard:
        main_prog, startup, _, loss = build_program("mnist_mlp", args.optimizer, args.lr, seed=1 + rank)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(main_prog, backend=args.backend, transport=transport)
        if rank == 0:
            print(f"[rank 0] dist_mnist_mlp: {nranks} rank(s), per-rank batch {args.batch_size}, "
                  f"{len(x)} samples, backend {args.backend}, transport {transport.name}", flush=True)
        start, window_start = time.perf_counter(), time.perf_counter()
        for step in range(args.steps):
            xb, yb = shard(x, y, args.batch_size, rank, nranks, step)
            (value,) = exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
            if rank == 0 and ((step + 1) % args.log_every == 0 or step == 0):
                now = time.perf_counter()
                steps = args.log_every if step else 1
                rate = steps * args.batch_size * nranks / (now - window_start)
                print(f"[rank 0] step {step + 1:5d}  loss {float(value):.4f}  {rate:9.0f} samples/s", flush=True)
                window_start = now
        elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"[rank 0] done: {args.steps} steps in {elapsed:.1f} s, "
              f"{args.steps * args.batch_size * nranks / elapsed:.0f} samples/s overall", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

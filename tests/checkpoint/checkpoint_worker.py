"""Trains the MLP with Adam (state: moments, beta powers) on the CPU backend, saving or resuming.

    checkpoint_worker.py --root R --out O --steps K [--save-and-die] [--resume]
--save-and-die: after K steps, save checkpoint K and SIGKILL this process (every rank).
--resume: load the latest checkpoint, then train steps [saved, saved + K).
Writes each rank's final parameters to O/rank<r>.npz.
"""
import argparse
import os
import signal
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-and-die", action="store_true")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()
    paddle.enable_static()
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "adam", lr=0.001)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main_prog)
    from paddle_ngraph.transpiler import engines

    transport = engines()[-1].transport
    first = paddle_ngraph.load_checkpoint(main_prog, args.root) if args.resume else 0
    for step in range(first, first + args.steps):
        xb, yb = shard(x, y, 16, transport.rank, transport.size, step)
        exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
    if args.save_and_die:
        paddle_ngraph.save_checkpoint(main_prog, args.root, first + args.steps)
        transport.barrier()  # rank 0's save is complete before anyone dies
        os.kill(os.getpid(), signal.SIGKILL)
    scope = paddle.static.global_scope()
    names = [n for n in scope.local_var_names() if n.startswith("linear_") or "moment" in n or "pow" in n]
    np.savez(os.path.join(args.out, f"rank{transport.rank}.npz"),
             **{n: np.array(scope.find_var(n).get_tensor()) for n in names})
    return 0


if __name__ == "__main__":
    sys.exit(main())

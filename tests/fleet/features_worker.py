"""One rank of a fleet script with Paddle's own strategy features and strategy.ngraph (features_test).

argv: --feature NAME (a key of FEATURES below), --ir pir|legacy, --out DIR. Trains STEPS exe.run
calls on this rank's shard of every global batch (features_data.py), then saves its parameters,
and the batch-norm statistics, to DIR/rank<r>.npz.

Several runs in one job (one start of the ranks for them all): their argument lists separated by
``--then``, each with its own ``--out``; they run one after the other, each with fleet.init of its
own strategy, its own program and scope.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import paddle_ngraph  # noqa: E402,F401  # adds strategy.ngraph
import paddle  # noqa: E402
import paddle.distributed.fleet as fleet  # noqa: E402

import features_data as fd  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--feature", required=True, choices=sorted(fd.FEATURES))
    p.add_argument("--ir", default="pir", choices=["pir", "legacy"])
    p.add_argument("--out", required=True)
    runs, current = [], []
    for arg in sys.argv[1:] + ["--then"]:
        if arg == "--then":
            runs.append(p.parse_args(current))
            current = []
        else:
            current.append(arg)
    for args in runs:
        with paddle.static.scope_guard(paddle.static.Scope()):  # no run reads another's variables
            train(args)


def train(args):
    spec = fd.FEATURES[args.feature]
    paddle.enable_static()
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    for name, value in spec["strategy"].items():
        setattr(strategy, name, value)
    fleet.init(is_collective=True, strategy=strategy)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    guard = paddle.pir_utils.OldIrGuard() if args.ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard:
        main_prog, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main_prog, startup):
            paddle.seed(fd.SEED)
            loss = fd.build(spec["batch_norm"])
            opt = fleet.distributed_optimizer(fd.optimizer(spec["optimizer"]))
            opt.minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        x, y = fd.data()
        for step in range(fd.STEPS):
            xb, yb = fd.shard(x, y, step, rank, nranks)
            exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
        np.savez(os.path.join(args.out, f"rank{rank}.npz"), **fd.state(main_prog))
    print("DONE " + json.dumps({"rank": rank, "nranks": nranks}), flush=True)


if __name__ == "__main__":
    main()

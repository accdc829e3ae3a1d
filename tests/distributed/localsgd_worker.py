"""One rank of a local SGD run (started by test_localsgd.py under mpirun or paddle.distributed.launch).

A small MLP (8 -> 16 relu -> 4, mean squared error) trained on this rank's half of every global
batch, with ``transpile(localsgd_k_steps=...)`` or, with ``--fleet``, through fleet with
``strategy.localsgd`` / ``strategy.adaptive_localsgd``. Writes <out>/rank<r>.npz: the data (every
rank's batches), rank 0's initial parameters, this rank's parameters after every step, its
losses, and per step whether the engine averaged and its k afterwards.

Several runs in one job (one start of the ranks for them all): their argument lists separated by
``--then``, each with its own ``--out``; they run one after the other, each on its own program.
"""
import argparse
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import detect_launcher  # noqa: E402
from paddle_ngraph.transpiler import engines  # noqa: E402

PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
BATCH, IN, HIDDEN, OUT = 8, 8, 16, 4


def data(steps: int, nranks: int):
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((steps, nranks * BATCH, IN)).astype(np.float32)
    y = rng.standard_normal((steps, nranks * BATCH, OUT)).astype(np.float32)
    return x, y


def fc(x, size, name):
    """paddle.static.nn.fc with its parameters named: a PIR program built after a legacy one in the
    same process would number them on from the earlier programs (fc_2.w_0, ...)."""
    return paddle.static.nn.fc(x, size, weight_attr=paddle.ParamAttr(name=f"{name}.w_0"),
                               bias_attr=paddle.ParamAttr(name=f"{name}.b_0"))


def build(args, seed):
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, IN], "float32")
        y = paddle.static.data("y", [None, OUT], "float32")
        h = paddle.nn.functional.relu(fc(x, HIDDEN, "fc_0"))
        loss = paddle.mean(paddle.square(fc(h, OUT, "fc_1") - y))
        lr = paddle.optimizer.lr.StepDecay(args.lr, step_size=args.lr_step, gamma=0.5) if args.lr_step else args.lr
        opt = (paddle.optimizer.Momentum(lr, momentum=0.9) if args.optimizer == "momentum"
               else paddle.optimizer.Adam(lr) if args.optimizer == "adam" else paddle.optimizer.SGD(lr))
        if args.fleet:
            from paddle.distributed import fleet

            fleet.init(is_collective=True)
            strategy = fleet.DistributedStrategy()
            strategy.ngraph = True
            strategy.ngraph_configs = {"backend": args.backend}
            if args.adaptive:
                strategy.adaptive_localsgd = True
                strategy.adaptive_localsgd_configs = {"init_k_steps": args.k, "begin_step": args.begin}
            else:
                strategy.localsgd = True
                strategy.localsgd_configs = {"k_steps": args.k, "begin_step": args.begin}
            opt = fleet.distributed_optimizer(opt, strategy)
        opt.minimize(loss)
    return main, startup, loss, lr


def parser():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"])
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--begin", type=int, default=2)
    p.add_argument("--adaptive", action="store_true")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr-step", type=int, default=0, help="StepDecay(gamma 0.5) every n steps; 0: constant")
    p.add_argument("--backend", default="CPU")
    p.add_argument("--ir", default="pir", choices=["pir", "legacy"])
    p.add_argument("--fleet", action="store_true")
    return p


def main():
    runs, current = [], []
    for arg in sys.argv[1:] + ["--then"]:
        if arg == "--then":
            runs.append(parser().parse_args(current))
            current = []
        else:
            current.append(arg)
    for args in runs:
        train(args)
    return 0


def train(args):
    info = detect_launcher()
    rank, nranks = info.rank, info.size
    paddle.enable_static()
    guard = paddle.pir_utils.OldIrGuard() if args.ir == "legacy" else paddle.pir_utils.IrGuard()
    xs, ys = data(args.steps, nranks)
    with guard:
        main_prog, startup, loss, lr = build(args, seed=1 + rank)  # different seeds: rank 0's broadcast wins
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            initial = {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}
            if not args.fleet:
                paddle_ngraph.transpile(main_prog, backend=args.backend, localsgd_k_steps=args.k,
                                        localsgd_begin_step=args.begin, localsgd_adaptive=args.adaptive)
            engine = engines()[-1]
            losses, synced, ks, per_step = [], [], [], {n: [] for n in PARAMS}
            for step in range(args.steps):
                lo = rank * BATCH
                out, = exe.run(main_prog, feed={"x": xs[step, lo:lo + BATCH], "y": ys[step, lo:lo + BATCH]},
                               fetch_list=[loss])
                losses.append(float(out))
                if not isinstance(lr, float):
                    lr.step()
                local = getattr(engine, "local", None)
                synced.append(local is not None and engine.last_step == engine.steps)
                ks.append(engine.k_steps if local is not None else 0)
                for n in PARAMS:
                    per_step[n].append(np.array(scope.find_var(n).get_tensor()))
    np.savez(os.path.join(args.out, f"rank{rank}.npz"), x=xs, y=ys, losses=np.array(losses),
             synced=np.array(synced), ks=np.array(ks), nranks=nranks,
             **{f"initial/{n}": v for n, v in initial.items()},
             **{f"steps/{n}": np.stack(v) for n, v in per_step.items()})


if __name__ == "__main__":
    sys.exit(main())

"""One rank of a sync_batch_norm equivalence run (started by tests/distributed/test_sync_batch_norm.py
under mpirun or paddle.distributed.launch).

Trains a model with batch norm on this rank's part of every global batch and writes the final
parameters and batch-norm running statistics, and the losses, to <out>/<optimizer>_rank<r>.npz.
``--reference``: plain Paddle, one process, the whole global batch. Batch norm over all ranks comes
from ``transpile(..., sync_batch_norm=True)`` (``--mode option``), or from Paddle's own
sync_batch_norm ops in the program (``--mode ops``: what SyncBatchNorm.convert_sync_batchnorm emits,
made as tests/harness.py:sync_batch_norm_program does), or not at all (``--mode none``, the control:
each rank normalizes with its own statistics). Ranks initialize with different seeds: rank 0's
start-up broadcast makes them equal. Several runs in one job: argument lists joined by ``--then``
(run_sequence.py).
"""
import argparse
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [TESTS, os.path.dirname(TESTS)]  # harness, and this checkout's paddle_ngraph

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from harness import sync_batch_norm_program  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from run_sequence import split_runs  # noqa: E402

LR = {"sgd": 0.1, "momentum": 0.05}
FEATURES, CLASSES = 12, 5


def build(model: str, optimizer: str, seed: int):
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        if model == "conv_bn":
            x = paddle.static.data("x", [-1, 3, 6, 6], "float32")
            h = paddle.nn.Conv2D(3, 6, 3, padding=1, bias_attr=False)(x)
            h = paddle.nn.functional.relu(paddle.nn.BatchNorm2D(6, momentum=0.8)(h))
            h = paddle.nn.Conv2D(6, 4, 3, stride=2, bias_attr=False)(h)
            h = paddle.nn.functional.relu(paddle.nn.BatchNorm2D(4, momentum=0.8)(h))
            # Global average pooling as a reduction (a reshape2's XShape does not survive translate_to_pir).
            logits = paddle.nn.Linear(4, CLASSES)(paddle.mean(h, axis=[2, 3]))
        else:
            x = paddle.static.data("x", [-1, FEATURES], "float32")
            # No bias before a batch norm (as the convolutions): its gradient is 0 up to rounding.
            h = paddle.nn.Linear(FEATURES, 16, bias_attr=False)(x)
            h = paddle.nn.functional.relu(paddle.nn.BatchNorm1D(16, momentum=0.8)(h))
            logits = paddle.nn.Linear(16, CLASSES)(h)
        y = paddle.static.data("y", [-1, 1], "int64")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        opt = paddle.optimizer.SGD(LR[optimizer]) if optimizer == "sgd" else paddle.optimizer.Momentum(LR[optimizer], 0.9)
        opt.minimize(loss)
    return main, startup, loss


def data(model: str, steps: int, global_batch: int):
    rng = np.random.default_rng(7)
    shape = (3, 6, 6) if model == "conv_bn" else (FEATURES,)
    # Off-centre and scaled inputs: batch statistics far from the initial running ones.
    x = (rng.standard_normal((steps, global_batch, *shape)) * 1.5 + 0.7).astype("float32")
    y = rng.integers(0, CLASSES, (steps, global_batch, 1)).astype("int64")
    return x, y


def persistable_names(main):
    """Parameters and batch-norm running statistics (no learning rate, no optimizer state)."""
    if paddle.framework.in_pir_mode():
        names = [op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter"]
    else:
        names = [v.name for v in main.list_vars() if v.persistable and v.name.split(".")[0].rstrip("_0123456789")
                 in ("linear", "conv2d", "batch_norm2d", "batch_norm1d")]
    return sorted(n for n in names if not n.startswith("learning_rate") and "velocity" not in n)


def loss_value(main):
    """The loss of a program translated to PIR (its values have no Python handle): the scalar mean."""
    return next(op.result(0) for op in main.global_block().ops
                if op.name() == "pd_op.mean" and len(op.result(0).shape) == 0)


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="conv_bn", choices=["conv_bn", "mlp_bn"])
    p.add_argument("--optimizers", default="sgd,momentum")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="per rank")
    p.add_argument("--ir", default="pir", choices=["pir", "legacy"])
    p.add_argument("--mode", default="option", choices=["option", "ops", "none"])
    p.add_argument("--backend", default=None)
    p.add_argument("--zero-stage", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--reference", action="store_true", help="plain Paddle, one process, the global batch")
    p.add_argument("--world", type=int, default=0, help="--reference: the ranks whose global batch to take")
    return p.parse_args(argv)


def main():
    runs = [parse(run) for run in split_runs(sys.argv[1:])]
    if len({args.reference for args in runs}) != 1:
        raise SystemExit("runs of one job share the transport: all or none --reference")
    paddle.enable_static()
    transport = make_transport("null" if runs[0].reference else None)
    for args in runs:
        train(args, transport)
    return 0


def train(args, transport):
    rank, nranks = transport.rank, transport.size
    world = args.world or nranks
    xs, ys = data(args.model, args.steps, args.batch * world)
    # Paddle's sync ops are made in a legacy program (and translated for PIR).
    guard = paddle.pir_utils.OldIrGuard() if args.ir == "legacy" or args.mode == "ops" else paddle.pir_utils.IrGuard()
    for opt in args.optimizers.split(","):
        with guard:
            main_prog, startup, loss = build(args.model, opt, seed=1 + rank)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            with guard:
                exe.run(startup)
            if args.mode == "ops" and not args.reference:
                main_prog = sync_batch_norm_program(main_prog, args.ir)
                if args.ir == "pir":
                    loss = loss_value(main_prog)
            run_guard = paddle.pir_utils.OldIrGuard() if args.ir == "legacy" else paddle.pir_utils.IrGuard()
            with run_guard:
                if not args.reference:
                    paddle_ngraph.transpile(main_prog, transport=transport, bucket_mb=0.001, backend=args.backend,
                                            fetch_list=[loss],  # (in a translated program the loss is no sink)
                                            zero_stage=args.zero_stage, sync_batch_norm=args.mode == "option")
                losses = []
                for step in range(args.steps):
                    lo, hi = (0, args.batch * world) if args.reference else (rank * args.batch, (rank + 1) * args.batch)
                    out = exe.run(main_prog, feed={"x": xs[step, lo:hi], "y": ys[step, lo:hi]}, fetch_list=[loss])
                    losses.append(float(np.asarray(out[0])))
                values = {n: np.array(scope.find_var(n).get_tensor()) for n in persistable_names(main_prog)}
        np.savez(os.path.join(args.out, f"{opt}_rank{rank}.npz"), losses=np.array(losses), **values)


if __name__ == "__main__":
    sys.exit(main())

"""One rank of a data-parallel equivalence run (started by the tests through tests/ranks.py).

Trains the model for each optimizer on this rank's shard of every global batch
and writes the final parameters and the losses to <out>/<optimizer>_rank<r>.npz.
Each rank initializes with a different seed: equality with the one-process
reference also proves that rank 0's start-up broadcast took effect.

Several runs in one job: argument lists joined by ``--then`` (run_sequence.py).
"""
import argparse
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from paddle_ngraph.transpiler import engines  # noqa: E402
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard  # noqa: E402
from run_sequence import split_runs  # noqa: E402

LR = {"sgd": 0.03, "momentum": 0.03, "adam": 0.001, "lars": 0.1, "lamb": 0.001}


def parameter_names(main):
    if paddle.framework.in_pir_mode():
        return sorted(op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter")
    return sorted(p.name for p in main.all_parameters())


def shm_collectives():
    """[AllReduce, ReduceScatter, AllGather]: how many this process ran over shared memory so far
    (each run records the difference over itself)."""
    try:
        from paddle_ngraph._cpu import shared_memory_collectives
    except ImportError:  # the CPU backend is not built: nothing went over shared memory
        return [0, 0, 0]
    counts = shared_memory_collectives()
    return [counts["AllReduce"], counts["ReduceScatter"], counts["AllGather"]]


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mnist_mlp")
    p.add_argument("--optimizers", default="sgd,momentum,adam")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--bucket-mb", type=float, default=32)
    p.add_argument("--ir", default="pir", choices=["pir", "legacy"])
    p.add_argument("--out", required=True)
    p.add_argument("--reference", action="store_true", help="plain Paddle, one process, global batch")
    p.add_argument("--world", type=int, default=0, help="--reference: the ranks whose batches it concatenates")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--zero-stage", type=int, default=0)
    p.add_argument("--backend", default=None, help="transpile's backend (default: the default backend)")
    p.add_argument("--accumulate-steps", type=int, default=1,
                   help="k micro-batches of --batch per step (the reference: run it with --batch k*batch)")
    p.add_argument("--hierarchical", default="auto", choices=["auto", "on", "off"])
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="pretend ranks r with equal r // k share a node (PADDLE_NGRAPH_NODE_ID)")
    p.add_argument("--compress", default="none", choices=["none", "bf16", "fp16"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--shm-allreduce", default="on", choices=["on", "off"], help="config key shm_allreduce")
    return p.parse_args(argv)


def main():
    runs = [parse(run) for run in split_runs(sys.argv[1:])]
    if len({args.reference for args in runs}) != 1 or len({args.ranks_per_node for args in runs}) != 1:
        raise SystemExit("runs of one job share the transport: the same --reference and --ranks-per-node")
    if runs[0].ranks_per_node:
        os.environ["PADDLE_NGRAPH_NODE_ID"] = str(int(os.environ["OMPI_COMM_WORLD_RANK"]) // runs[0].ranks_per_node)
    paddle.enable_static()
    transport = make_transport("null" if runs[0].reference else None)
    for args in runs:
        train(args, transport)
    return 0


def train(args, transport):
    rank, nranks = transport.rank, transport.size
    shm_before = shm_collectives()
    world = args.world or nranks
    paddle.set_default_dtype(args.dtype)
    x, y = digits_as_mnist()
    x = x.astype(args.dtype)
    if args.model != "mnist_mlp":
        x = x.reshape(-1, 1, 28, 28)
    guard = paddle.pir_utils.OldIrGuard() if args.ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard:
        for opt in args.optimizers.split(","):
            main_prog, startup, _, loss = build_program(args.model, opt, LR[opt], seed=1 + rank)
            scope = paddle.static.Scope()
            exe = paddle.static.Executor(paddle.CPUPlace())
            with paddle.static.scope_guard(scope):
                exe.run(startup)
                if not args.reference:
                    paddle_ngraph.transpile(main_prog, transport=transport, bucket_mb=args.bucket_mb,
                                            zero_stage=args.zero_stage, backend=args.backend,
                                            hierarchical=args.hierarchical, compress=args.compress,
                                            accumulate_steps=args.accumulate_steps, precision=args.precision,
                                            shm_allreduce=args.shm_allreduce == "on")
                losses = []
                for step in range(args.steps):
                    if args.reference:
                        xb, yb = shard(x, y, args.batch * world, 0, 1, step)
                    else:
                        xb, yb = shard(x, y, args.batch * args.accumulate_steps, rank, nranks, step)
                    # This rank's share of the step's batch, in micro-batches of --batch (one unless
                    # accumulating); the step's loss is their mean, as over the whole share.
                    micro = np.array_split(np.arange(len(xb)), 1 if args.reference else args.accumulate_steps)
                    losses.append(np.mean([exe.run(main_prog, feed={"x": xb[i], "y": yb[i]}, fetch_list=[loss])[0]
                                           for i in micro]))
                params = {n: np.array(scope.find_var(n).get_tensor()) for n in parameter_names(main_prog)}
                # The CPU backend's native allreduce, as the C++ communicator describes itself.
                native = getattr(engines()[-1].executable, "communicator", "") if not args.reference else ""
            np.savez(os.path.join(args.out, f"{opt}_rank{rank}.npz"), losses=np.array(losses),
                     hierarchical=np.array(getattr(transport, "hierarchical", False)), native=np.array(native),
                     shm_collectives=np.array(shm_collectives()) - np.array(shm_before), **params)


if __name__ == "__main__":
    sys.exit(main())

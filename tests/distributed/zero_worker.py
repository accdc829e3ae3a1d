"""One rank of the ZeRO-1 memory and checkpoint test (under mpirun).

Trains the MLP with Adam for K steps, saves a checkpoint, trains K more steps, loads the
checkpoint back and trains the same K steps again. Writes report<rank>.json (optimizer state
bytes: full, held in slices, still in the scope; whether the resumed run ended equal bitwise) and,
on rank 0, the checkpoint's optimizer state as read by paddle.static.load_program_state.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.distributed import make_transport  # noqa: E402
from paddle_ngraph.transpiler import engines  # noqa: E402
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard  # noqa: E402

K = 4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--zero-stage", type=int, default=1)
    args = p.parse_args()
    paddle.enable_static()
    transport = make_transport()
    rank, nranks = transport.rank, transport.size
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "adam", 0.001, seed=1)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    scope = paddle.static.global_scope()
    params = sorted(op.attrs()["parameter_name"] for op in main_prog.global_block().ops
                    if op.name() == "builtin.parameter")
    moments = [n for n in scope.local_var_names() if "moment" in n]
    full_bytes = sum(np.array(scope.find_var(n).get_tensor()).nbytes for n in moments)
    paddle_ngraph.transpile(main_prog, transport=transport, bucket_mb=0.5, zero_stage=args.zero_stage)

    def train(first):
        for step in range(first, first + K):
            xb, yb = shard(x, y, 16, rank, nranks, step)
            exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
        return {n: np.array(scope.find_var(n).get_tensor()) for n in params}

    train(0)
    root = os.path.join(args.out, "ckpt")
    paddle_ngraph.save_checkpoint(main_prog, root, K)
    after = train(K)
    in_scope = sum(np.array(scope.find_var(n).get_tensor()).nbytes for n in moments
                   if scope.find_var(n).get_tensor()._is_initialized())
    assert paddle_ngraph.load_checkpoint(main_prog, root) == K
    resumed = train(K)
    sharded = [e.sharded for e in engines() if e.sharded is not None]
    report = {
        "full_state_bytes": full_bytes,
        "sharded_state_bytes": sum(s.nbytes() for s in sharded) - sum(  # the slices of moments only
            a.nbytes for s in sharded for n, a in zip(s.names, s.arrays) if n == s.sources[n].master),
        "buckets": sum(len(s.buckets) for s in sharded),
        "moments_in_scope_bytes": in_scope,
        "resumed_equal": all(np.array_equal(after[n], resumed[n]) for n in params),
    }
    with open(os.path.join(args.out, f"report{rank}.json"), "w") as f:
        json.dump(report, f)
    if rank == 0:
        state = paddle.static.load_program_state(os.path.join(root, f"step-{K:06d}", "model"))
        np.savez(os.path.join(args.out, "checkpoint_state.npz"), **{n: v for n, v in state.items() if "moment" in n})
    return 0


if __name__ == "__main__":
    sys.exit(main())

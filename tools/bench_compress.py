#!/usr/bin/env python
"""Accuracy effect of the compressed allreduce (compress: bf16|fp16) on the reference models.

For each model and wire format, trains under mpirun on --ranks ranks (CPU backend, MPI transport,
the digits data set as 28x28 images, each rank its shard of every global batch, momentum SGD)
and reports the final loss (mean over ranks of the last 10 steps) and the largest per-step loss
difference against float32 gradients (compress none), all from the same run:
  python tools/bench_compress.py --models mnist_mlp,lenet --steps 100 [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from paddle_ngraph.quiet import quiet_env, quiet_this_process

quiet_this_process()
HERE = os.path.dirname(os.path.abspath(__file__))
FORMATS = ("none", "bf16", "fp16")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mnist_mlp,lenet", help="comma-separated zoo models (default mnist_mlp,lenet)")
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch", type=int, default=32, help="per-rank batch (default 32)")
    p.add_argument("--ranks", type=int, default=2, help="ranks under mpirun (default 2)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # result file of one run
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--compress", default="none", choices=FORMATS, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.zoo import build_program, digits_as_mnist, shard

    paddle.enable_static()
    transport = make_transport(None)
    x, y = digits_as_mnist()
    if args.model != "mnist_mlp":
        x = x.reshape(-1, 1, 28, 28)
    main, startup, _, loss = build_program(args.model, "momentum", args.lr, seed=1)
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    losses = []
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        paddle_ngraph.transpile(main, backend="CPU", transport=transport, compress=args.compress)
        for step in range(args.steps):
            xb, yb = shard(x, y, args.batch, transport.rank, transport.size, step)
            losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
    everyone = transport.allgather_object(losses)
    if transport.rank == 0:
        with open(args.worker, "w") as f:
            json.dump(np.mean(everyone, axis=0).tolist(), f)  # the global batch's loss per step
    return 0


def run(model, compress, args, tmp):
    out = os.path.join(tmp, f"{model}_{compress}.json")
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(args.ranks), "-x", "PYTHONPATH",
           "-x", "GLOG_minloglevel", "-x", "PYTHONWARNINGS", sys.executable, os.path.abspath(__file__), "--worker", out, "--model", model,
           "--compress", compress, "--steps", str(args.steps), "--batch", str(args.batch), "--lr", str(args.lr)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env=quiet_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    if proc.returncode != 0:
        raise SystemExit(f"{model} {compress}: training failed: {(proc.stderr or proc.stdout)[-2000:]}")
    return json.load(open(out))


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    results = []
    print(f"{'model':12s} {'compress':8s} {'final loss':>10s} {'max |dloss| vs none':>20s}   "
          f"({args.ranks} ranks, {args.steps} steps, batch {args.batch}/rank)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            base = None
            for compress in FORMATS:
                losses = run(model, compress, args, tmp)
                base = base or losses
                final = sum(losses[-10:]) / len(losses[-10:])
                diff = max(abs(a - b) for a, b in zip(losses, base))
                results.append({"model": model, "compress": compress, "final_loss": final, "max_abs_diff": diff,
                                "losses": losses, "ranks": args.ranks, "steps": args.steps, "batch": args.batch})
                print(f"{model:12s} {compress:8s} {final:10.5f} {diff:20.2e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

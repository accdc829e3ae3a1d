"""A fleet script with a bad paddle_ngraph configuration: every rank must fail by itself.

``--configs JSON`` is assigned to ``strategy.ngraph_configs``; a bad value in the
environment (``PADDLE_NGRAPH_<KEY>``) fails at ``fleet.distributed_optimizer``.

``--record DIR`` runs the same script (without --record) as a child process and writes
its real exit code and output to DIR/rank<r>.json, then exits with that code: mpirun
would otherwise kill the other ranks as soon as one exits non-zero, before they print.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def record(out_dir: str) -> int:
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PADDLE_TRAINER_ID", "0"))
    argv = [a for i, a in enumerate(sys.argv[1:]) if a != "--record" and sys.argv[i] != "--record"]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, timeout=120)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"code": proc.returncode, "output": proc.stdout + proc.stderr,
                   "seconds": time.monotonic() - start}, f)
    sys.stdout.write(proc.stdout)
    return proc.returncode


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="{}")
    p.add_argument("--record")
    args = p.parse_args()
    if args.record:
        return record(args.record)

    import paddle
    import paddle.distributed.fleet as fleet

    import paddle_ngraph  # noqa: F401

    paddle.enable_static()
    fleet.init(is_collective=True)
    rank = fleet.worker_index()
    x = paddle.static.data("x", [None, 4], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(4, 3)(x), y))
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = json.loads(args.configs)  # an uncaught ConfigError, as in any script
    opt = fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)
    opt.minimize(loss)
    print(f"[rank {rank}] no error", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

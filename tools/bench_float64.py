"""float64 speed of the CPU backend against Paddle, in interleaved rounds (the machine is shared).

    python tools/bench_float64.py                          # resnet18 dygraph loop + matmul, 5 rounds
    python tools/bench_float64.py --model resnet50 --size 64 --rounds 3
    python tools/bench_float64.py --engines before=/tmp/old_tree,after=.   # two builds of the engine

What runs, each configuration in a fresh process per round, the configurations in turn in every round:
  paddle   paddle.vision.models.<model> (num_classes 10) in a dygraph loop in float64: forward, cross
           entropy, backward, SGD step; Paddle's own kernels
  ngraph   the same loop with the model wrapped in paddle_ngraph.DataParallel (one rank: the engine's
           CPU backend runs forward and backward); once per --engines entry
  matmul   float64 MatMul on the CPU backend (one engine function per shape, steady-state calls) against
           paddle.matmul in eager mode, per shape of MATMUL_SHAPES
--engines label=dir,... : directories holding a paddle_ngraph package each (put first on PYTHONPATH), to
compare builds of the native library in the same rounds; default: the importable one.
Per configuration: median ms per step over rounds (each round's value the median of --steps steps after
--warmup) and the spread (min..max of the round values).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_small import median_step as small_median_step  # noqa: E402

# (a, b, transpose_a, transpose_b): square, a Linear's weight gradient (a^T @ b) and forward, batched
# with broadcasting.
MATMUL_SHAPES = [((512, 512), (512, 512), False, False), ((256, 1000), (256, 512), True, False),
                 ((64, 512), (1000, 512), False, True), ((16, 64, 96), (96, 80), False, False)]


def median_step(step, steps: int, warmup: int) -> float:
    """Median milliseconds of ``step`` (bench_small's timing loop)."""
    return 1e3 * small_median_step(step, steps, warmup)


def model_worker(system: str, model: str, size: int, batch: int, steps: int, warmup: int) -> dict:
    import paddle

    paddle.set_default_dtype("float64")
    paddle.seed(0)
    net = getattr(paddle.vision.models, model)(num_classes=10)
    if system == "ngraph":
        import paddle_ngraph

        net = paddle_ngraph.DataParallel(net)
    opt = paddle.optimizer.SGD(0.01, parameters=net.parameters())
    rng = np.random.default_rng(0)
    x = paddle.to_tensor(rng.standard_normal((batch, 3, size, size)))
    y = paddle.to_tensor(rng.integers(0, 10, (batch, 1)))

    def step():
        loss = paddle.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)

    return {"ms": median_step(step, steps, warmup)}


def matmul_worker(steps: int, warmup: int) -> dict:
    import paddle

    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.ir import Function, ops

    rng = np.random.default_rng(0)
    out = {}
    for a_shape, b_shape, ta, tb in MATMUL_SHAPES:
        a = ops.Parameter(dtype="float64", shape=a_shape, name="a")
        b = ops.Parameter(dtype="float64", shape=b_shape, name="b")
        f = Function([a, b], {"c": ops.MatMul(a.output(), b.output(), transpose_a=ta, transpose_b=tb).output()})
        inputs = [rng.standard_normal(a_shape), rng.standard_normal(b_shape)]
        compiled = get_backend("CPU").compile(f)
        pa, pb = paddle.to_tensor(inputs[0]), paddle.to_tensor(inputs[1])
        key = f"{a_shape}{'^T' if ta else ''}@{b_shape}{'^T' if tb else ''}"
        out[f"engine {key}"] = median_step(lambda: compiled.call(inputs), steps, warmup)
        out[f"paddle {key}"] = median_step(lambda: paddle.matmul(pa, pb, transpose_x=ta, transpose_y=tb).numpy(),
                                           steps, warmup)
    return out


def run_worker(args) -> None:
    if args.system == "matmul":
        result = matmul_worker(args.steps * 5, args.warmup)
    else:
        result = model_worker(args.system, args.model, args.size, args.batch, args.steps, args.warmup)
    print(json.dumps(result))


def configurations(args) -> list[tuple[str, list[str], dict]]:
    """(label, worker arguments, environment) of every configuration of a round."""
    engines = [e.split("=", 1) for e in args.engines.split(",")] if args.engines else [["ngraph", ""]]
    common = ["--model", args.model, "--size", str(args.size), "--batch", str(args.batch), "--steps", str(args.steps),
              "--warmup", str(args.warmup)]
    env = dict(os.environ)
    configs = [("paddle", ["--system", "paddle", *common], env)]
    for label, directory in engines:
        engine_env = dict(env)
        if directory:
            engine_env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(directory), env.get("PYTHONPATH", "")])
        configs.append((label, ["--system", "ngraph", *common], engine_env))
        if not args.no_matmul:
            configs.append((f"{label} matmul", ["--system", "matmul", *common], engine_env))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18", help="a paddle.vision.models constructor (default resnet18)")
    parser.add_argument("--size", type=int, default=32, help="image height and width (default 32)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round (default 10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engines", default="", help="label=dir,...: paddle_ngraph trees to compare")
    parser.add_argument("--no-matmul", action="store_true", help="skip the matmul micro-benchmark")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    results: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for label, worker_args, env in configurations(args):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *worker_args], env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
            values = json.loads(proc.stdout.strip().splitlines()[-1])
            for key, ms in values.items():
                name = label if key == "ms" else f"{label.split()[0]} {key}" if key.startswith("engine") else key
                results.setdefault(name, []).append(ms)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{args.model} {args.size}x{args.size} batch {args.batch} float64, {args.rounds} rounds")
    print(f"{'configuration':<58} {'median ms':>10} {'spread (min..max)':>20}")
    for name, values in results.items():
        print(f"{name:<58} {np.median(values):>10.2f} {min(values):>9.2f}..{max(values):<9.2f}")


if __name__ == "__main__":
    main()

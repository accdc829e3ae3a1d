#!/usr/bin/env python
"""Training step time of paddle.vision.models on the engine against Paddle's own executor.

  python tools/bench_zoo.py                                # a model per family
  python tools/bench_zoo.py --models resnet18 mobilenet_v2 --batch 16 --size 64 --rounds 5
  python tools/bench_zoo.py --models resnet18 --leave-to-paddle pd_op.flatten pd_op.flatten_grad
                                          # what the fallback costs: these ops run in Paddle
                                          # between engine segments (their converters are hidden
                                          # from the transpiler in this process)

One process. Each model is built twice (paddle_ngraph.zoo.vision: 10 classes, Momentum), once
transpiled for the CPU backend and once left to Paddle's executor; both train on the same random
batches. The machine is shared and moves by 1.5x within minutes, so the systems alternate: each
round times --steps steps of one system then of the other (the first system of a round alternates
too), and the table reports the median over rounds of each system's median step, its spread
(min-max over rounds), samples/s, and the ratio engine/Paddle in samples/s. Progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from paddle_ngraph.quiet import quiet_this_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["alexnet", "densenet121", "googlenet", "inception_v3", "mobilenet_v1", "mobilenet_v2",
            "mobilenet_v3_small", "resnet18", "resnet50", "resnext50_32x4d", "shufflenet_v2_x1_0",
            "squeezenet1_1", "vgg11"]


def system(name: str, ours: bool, batch: int):
    """A step function of one system on ``name``."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.zoo import vision

    paddle.seed(1)
    main, startup, loss = vision.build(name, batch=batch)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if ours:
            paddle_ngraph.transpile(main, backend="CPU")
    data = vision.batches(name, 4, batch)

    def step(i):
        x, y = data[i % len(data)]
        with paddle.static.scope_guard(scope):
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])

    return step


def timed(step, steps: int, warmup: int) -> float:
    for i in range(warmup):
        step(i)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", nargs="*", default=FAMILIES, help="constructors of paddle.vision.models")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=0, help="input size (default: the zoo's smallest, 32)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per system per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the table (Markdown) here")
    parser.add_argument("--leave-to-paddle", nargs="*", default=[], metavar="OP",
                        help="op types (as in the program: pd_op.flatten, flatten_contiguous_range) left to Paddle")
    args = parser.parse_args(argv)
    quiet_this_process()
    sys.path.insert(0, ROOT)
    import logging

    import paddle

    import paddle_ngraph
    from paddle_ngraph.zoo import vision

    logging.getLogger("paddle_ngraph").setLevel(logging.WARNING)
    paddle.enable_static()
    if args.leave_to_paddle:
        from paddle_ngraph.frontend import OP_TABLE

        for op_type in args.leave_to_paddle:
            if OP_TABLE.pop(op_type, None) is None:
                parser.error(f"--leave-to-paddle: {op_type} has no converter")
    lines = ["| model | input | engine ms/step (spread) | Paddle ms/step (spread) | engine samples/s | "
             "Paddle samples/s | engine / Paddle |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in args.models:
        if args.size:
            vision.INPUT_SIZE[name] = args.size
        batch = min(args.batch, vision.BATCH.get(name, args.batch))
        started, engines_before = time.monotonic(), len(paddle_ngraph.engines())
        steps = {True: system(name, True, batch), False: system(name, False, batch)}
        print(f"[bench_zoo] {name}: built in {time.monotonic() - started:.1f} s, "
              f"{len(paddle_ngraph.engines()) - engines_before} engine segment(s)", file=sys.stderr, flush=True)
        medians = {True: [], False: []}
        for r in range(args.rounds):
            for ours in ((True, False) if r % 2 == 0 else (False, True)):
                medians[ours].append(timed(steps[ours], args.steps, args.warmup if r == 0 else 0))
            print(f"[bench_zoo] {name} round {r + 1}/{args.rounds}: engine {medians[True][-1] * 1e3:.1f} ms, "
                  f"Paddle {medians[False][-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
        ours, theirs = statistics.median(medians[True]), statistics.median(medians[False])
        size = vision.input_size(name)
        lines.append(f"| `{name}` | {batch}x3x{size}x{size} | {ours * 1e3:.1f} ({min(medians[True]) * 1e3:.1f}-"
                     f"{max(medians[True]) * 1e3:.1f}) | {theirs * 1e3:.1f} ({min(medians[False]) * 1e3:.1f}-"
                     f"{max(medians[False]) * 1e3:.1f}) | {batch / ours:.0f} | {batch / theirs:.0f} | "
                     f"{theirs / ours:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The CPU backend's default compute thread count against one thread, one process, in one run.

    python tools/bench_threads.py                                   # the four bench models
    python tools/bench_threads.py --models mnist_mlp --rounds 9 --steps 50

The default (the ``threads`` key at 0: the cores divided by the ranks on the node) must never be slower
than one thread. Each round runs every (model, threads) job once, interleaved, so both see the same
machine load; reported per model: median ms/step of each over rounds, min-max, and the median over
rounds of the ratio default / one thread (below 1: the default is faster).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(bench.MODELS), help="comma-separated, from: " + ", ".join(bench.MODELS))
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per job (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=128, help="batch (default 128)")
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in bench.MODELS:
            p.error(f"unknown model '{m}'; valid: {', '.join(bench.MODELS)}")
    # What bench.run_once reads of its arguments, for one plain step per job.
    job = argparse.Namespace(batch=args.batch, steps=args.steps, warmup=args.warmup, repeats=1, optimizer="sgd",
                             bucket_mb=32.0, zero_stage=0, compress="none", timeout=900)
    default_threads = os.cpu_count() or 1
    variants = {"default": None, "1 thread": 1}
    times = {(m, v): [] for m in models for v in variants}
    for r in range(args.rounds):
        for m in models:
            for name, threads in variants.items():
                print(f"[round {r + 1}/{args.rounds}] {m} {name}...", end=" ", file=sys.stderr, flush=True)
                started = time.monotonic()
                result = bench.run_once("ngraph-cpu", m, 1, job, threads=threads)
                if result["status"] != "ok":
                    print(f"{result['status']}: {result['reason'][-300:]}", file=sys.stderr)
                    return 1
                times[(m, name)].append(result["ms_per_step"])
                print(f"{result['ms_per_step']:.2f} ms/step ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                      flush=True)
    print(f"\n{bench.machine()}; one process, batch {args.batch}, {args.rounds} interleaved rounds of "
          f"{args.steps} steps; default = {default_threads} threads\n")
    print(f"| model | default ms/step (spread) | 1 thread ms/step (spread) | default / 1 thread (spread) |")
    print("| --- | --- | --- | --- |")
    for m in models:
        d, one = np.array(times[(m, "default")]), np.array(times[(m, "1 thread")])
        ratio = d / one
        print(f"| {m} | {np.median(d):.2f} ({d.min():.2f}-{d.max():.2f}) | {np.median(one):.2f} "
              f"({one.min():.2f}-{one.max():.2f}) | {np.median(ratio):.2f} ({ratio.min():.2f}-{ratio.max():.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""What an elastic commit costs per training step, committing every k steps, on zoo models.

    python tools/bench_elastic_commit.py --models resnet18 --ks 1,10,100
    mpirun --with-ft ulfm -np 2 --allow-run-as-root --oversubscribe python tools/bench_elastic_commit.py \
        --zero-stage 1        # the commit gathers the sliced optimizer state (an allgather)

Each model is a static program of paddle_ngraph.zoo.vision (Momentum, 32x32 inputs, batch 8),
held by ``elastic.State(program=...)`` and transpiled by ``state.transpile``. In every round (the
machine may be shared, so they are interleaved) it times --steps training steps one by one, one
``state.commit()`` (in memory) and the step after it, one ``state.commit(save=True)`` (also to disk:
rank 0 writes, fsynced, atomically) and the step after it. A commit holds the memory of the state
the engines update and the step after it writes the new values elsewhere, so what committing costs
is the commit plus what that step takes beyond the round's median step. Reported on rank 0, per
model: the medians over the rounds (and min-max) of a step, a commit, the step after it (beyond a
step) and a saved commit, then per k the cost per step of committing every k steps, that cost / k,
in ms and as a share of the step.
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def _spread(values):
    return f"{statistics.median(values) * 1e3:.1f} ms ({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f})"


def bench(model: str, backend: str, zero_stage: int, steps: int, rounds: int, ks: list[int], root: str):
    import paddle

    from paddle_ngraph import elastic
    from paddle_ngraph.zoo import vision

    paddle.seed(1)
    main, startup, loss = vision.build(model)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    state = elastic.State(program=main, checkpoint_dir=os.path.join(root, model), step=0)
    data = vision.batches(model, steps)
    timings = {"step": [], "commit": [], "after commit": [], "commit(save=True)": [], "after save": []}
    nbytes = []

    @elastic.run
    def train(state):
        program, (fetch,) = state.transpile([loss], backend=backend, zero_stage=zero_stage)

        def step(x, y):
            begin = time.perf_counter()
            exe.run(program, feed={"x": x, "y": y}, fetch_list=[fetch])
            return time.perf_counter() - begin

        def timed(call):
            begin = time.perf_counter()
            call()
            return time.perf_counter() - begin

        step(*data[0])  # compile, warm up
        state.commit()  # the first commit allocates the spare memory of the held state
        step(*data[0])
        for _ in range(rounds):
            median = statistics.median([step(x, y) for x, y in data])
            timings["step"].append(median)
            timings["commit"].append(timed(state.commit))
            timings["after commit"].append(step(*data[0]) - median)
            timings["commit(save=True)"].append(timed(lambda: state.commit(save=True)))
            timings["after save"].append(step(*data[0]) - median)
            nbytes.append(sum(v.nbytes for v in state._snapshot["state"]["scope"].values()))

    train(state)
    if elastic.rank() != 0:
        return
    step = statistics.median(timings["step"])
    memory = [c + a for c, a in zip(timings["commit"], timings["after commit"])]
    disk = [c + a for c, a in zip(timings["commit(save=True)"], timings["after save"])]
    print(f"{model} ({backend} backend, zero_stage {zero_stage}, {elastic.size()} rank(s), {nbytes[-1] / 2**20:.1f} MB of persistable "
          f"variables, {rounds} rounds): step {_spread(timings['step'])}; commit {_spread(timings['commit'])}, "
          f"the step after it beyond a step {_spread(timings['after commit'])}, together {_spread(memory)}; "
          f"commit(save=True) {_spread(timings['commit(save=True)'])}, the step after it beyond a step "
          f"{_spread(timings['after save'])}")
    print("| k | commit every k steps: ms/step | share of a step | commit(save=True) every k: ms/step | share |")
    print("| --- | --- | --- | --- | --- |")
    for k in ks:
        in_memory = max(0.0, statistics.median(memory)) / k
        on_disk = max(0.0, statistics.median(disk)) / k
        print(f"| {k} | {in_memory * 1e3:.2f} | {in_memory / step:.1%} | {on_disk * 1e3:.2f} | {on_disk / step:.1%} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18", help="zoo vision models, comma-separated (default resnet18)")
    p.add_argument("--backend", default="CPU")
    p.add_argument("--zero-stage", type=int, default=0, choices=(0, 1), help="ZeRO-1 (default 0)")
    p.add_argument("--ks", default="1,10,100", help="commit every k steps (default 1,10,100)")
    p.add_argument("--steps", type=int, default=5, help="steps timed per round (default 5)")
    p.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    p.add_argument("--dir", default=None, help="where commit(save=True) writes (default: a temporary directory)")
    args = p.parse_args(argv)
    import paddle

    paddle.enable_static()
    root = args.dir or tempfile.mkdtemp(prefix="bench_elastic_")
    try:
        for model in args.models.split(","):
            bench(model, args.backend, args.zero_stage, args.steps, args.rounds, [int(k) for k in args.ks.split(",")], root)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

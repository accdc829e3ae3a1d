#!/usr/bin/env python
"""How long elastic training stands still after a rank dies: from the kill to the next completed step.

    python tools/bench_elastic_recovery.py --model resnet18 --rounds 3

Each round is one job, ``mpirun --with-ft ulfm -np 3`` (started by this tool), training a static
program of paddle_ngraph.zoo.vision (Momentum, 32x32, batch 8 per rank) through
``elastic.State(program=...)`` and ``state.transpile``, committing in memory after every step.
World rank 1 SIGKILLs itself at the start of step --kill-step. Times, by the wall clock shared by
the ranks of one host:

- kill -> restored: the survivors' collective fails, they revoke and shrink the group, take the
  new rank 0's commit and restore it (measured at the reset callback);
- restored -> next step: the training function is called again: the program is transpiled for
  the new group and compiled, the first step's start-up sync and the step itself;
- kill -> next step: the sum, what training loses to the failure beyond the lost steps.

Reported: per phase the median over the rounds and the min-max, next to a step's time before the
kill (on 3 ranks) and after (on 2).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()
KILLED_WORLD_RANK = 1


def worker(args):
    import paddle

    from paddle_ngraph import elastic
    from paddle_ngraph.zoo import vision

    paddle.enable_static()
    world = int(os.environ["OMPI_COMM_WORLD_RANK"])
    paddle.seed(1)
    main, startup, loss = vision.build(args.model)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    state = elastic.State(program=main, step=0)
    data = vision.batches(args.model, 4)
    times = {"steps": [], "restored": None}
    state.register_reset_callbacks([lambda: times.__setitem__("restored", time.time())])

    @elastic.run(min_ranks=2)
    def train(state):
        program, (fetch,) = state.transpile([loss], backend=args.backend)
        size = elastic.size()
        while state.step < args.steps:
            if world == KILLED_WORLD_RANK and state.step == args.kill_step:
                with open(os.path.join(args.worker, "killed"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = data[state.step % len(data)]
            begin = time.time()
            exe.run(program, feed={"x": x, "y": y}, fetch_list=[fetch])
            times["steps"].append((size, begin, time.time()))
            state.step += 1
            state.commit()

    train(state)
    if elastic.rank() == 0:
        with open(os.path.join(args.worker, "times.json"), "w") as f:
            json.dump(times, f)


def one_round(args, directory) -> dict:
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--with-ft", "ulfm", "-np", "3", sys.executable,
               os.path.abspath(__file__), "--worker", directory, "--model", args.model, "--backend", args.backend,
               "--steps", str(args.steps), "--kill-step", str(args.kill_step)]
    job = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.timeout)
    try:
        with open(os.path.join(directory, "killed")) as f:
            killed = float(f.read())
        with open(os.path.join(directory, "times.json")) as f:
            times = json.load(f)
    except FileNotFoundError:
        sys.exit(f"the job did not finish as expected (exit {job.returncode}):\n{job.stdout[-4000:]}")
    after = [(begin, end) for size, begin, end in times["steps"] if size == 2]
    return {"kill -> restored": times["restored"] - killed,
            "restored -> next step": after[0][1] - times["restored"],
            "kill -> next step": after[0][1] - killed,
            "step on 3 ranks": statistics.median(end - begin for size, begin, end in times["steps"] if size == 3),
            "step on 2 ranks": statistics.median(end - begin for begin, end in after[1:] or after)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18", help="a zoo vision model (default resnet18)")
    p.add_argument("--backend", default="CPU")
    p.add_argument("--rounds", type=int, default=3, help="jobs, one kill each (default 3)")
    p.add_argument("--steps", type=int, default=8, help="steps per job (default 8)")
    p.add_argument("--kill-step", type=int, default=4, help="the step world rank 1 dies at (default 4)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per job (default 600)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # set by this tool for the ranks it starts
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench_elastic_recovery_") as directory:
            rounds.append(one_round(args, directory))
    print(f"{args.model}, {args.backend} backend, 3 ranks -> 2 (world rank 1 killed at step {args.kill_step}), "
          f"{args.rounds} rounds: median (min-max)")
    print("| phase | seconds |")
    print("| --- | --- |")
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(f"| {key} | {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}) |")


if __name__ == "__main__":
    main()

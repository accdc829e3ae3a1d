#!/usr/bin/env python
"""Elastic dygraph data-parallel training of an MLP on handwritten digits: a rank lost, the others go on.

The training function runs under `paddle_ngraph.elastic.run`: when a rank dies, the survivors
shrink the group, go back to the last commit and continue; with --max-ranks and a host discovery
(--hostfile: the MPIJob's, probed by `paddle_ngraph.elastic.discover_mpijob`; or --discovery: a
Horovod host discovery script), new ranks join at a commit where hosts have room. Start it with
Open MPI's fault tolerance on:

    mpirun --with-ft ulfm -np 2 python examples/elastic_mnist_mlp.py --steps 60
    mpirun --with-ft ulfm -np 2 python examples/elastic_mnist_mlp.py --max-ranks 2 --hostfile /etc/mpi/hostfile

(deploy/k8s/mpijob-elastic.yaml runs the first on Kubernetes; ranks joining across pods do not work
with Open MPI 5.0: docs/KUBERNETES.md, "The elastic MPIJob"). The global batch is kept whatever
the group's size (--global-batch rows, split evenly over the ranks there are), so that a step is
the same update on any group. Rank 0 prints its loss every --log-every steps; every rank prints
one line each time the function starts (its group and step), and at the end a SHA-256 of its
parameters, the same on every rank. --checkpoint-dir with --save-at writes a commit to disk at
that step; a directory that already holds one is resumed from (a job restarted from a commit).
"""
import argparse
import hashlib
import os
import time

import numpy as np
import paddle
import paddle.nn.functional as F

import paddle_ngraph
from paddle_ngraph import elastic
from paddle_ngraph.zoo.data import digits_as_mnist


def world_rank() -> int:
    """This process's name in messages: mpirun's rank, or the one the group gave a process it spawned."""
    return int(os.environ.get("PADDLE_NGRAPH_ELASTIC_WORLD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def parameter_digest(layer) -> str:
    """SHA-256 of the Layer's parameters, in order: equal across ranks and runs iff bitwise equal."""
    digest = hashlib.sha256()
    for name, param in layer.state_dict().items():
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(param.numpy()).tobytes())
    return digest.hexdigest()


def batch(x, y, step: int, rows: int, rank: int, size: int):
    """This rank's part of global batch ``step`` (``rows`` rows in all), cycling over the data."""
    start = (step * rows) % (len(x) - rows + 1)
    part = rows // size
    lo = start + rank * part
    return x[lo:lo + part], y[lo:lo + part]


def discovery_of(args):
    if args.hostfile:
        from paddle_ngraph.elastic.discover_mpijob import discover

        return lambda: discover(args.hostfile, args.ssh_port)
    return args.discovery


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--global-batch", type=int, default=64, help="rows per step over all ranks (divisible by "
                   "every group size the job may have)")
    p.add_argument("--lr", type=float, default=0.05, help="Adam's learning rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--commit-every", type=int, default=2, metavar="K", help="commit after every K steps")
    p.add_argument("--min-ranks", type=int, default=1, help="below this many survivors: stop")
    p.add_argument("--max-ranks", type=int, help="grow back up to this many ranks (with a discovery)")
    p.add_argument("--hostfile", help="discovery: this Open MPI hostfile's hosts whose sshd answers")
    p.add_argument("--ssh-port", type=int, default=2222, help="the workers' sshd port (with --hostfile)")
    p.add_argument("--discovery", help="discovery: a host discovery script (host:slots lines)")
    p.add_argument("--checkpoint-dir", help="commits on disk go here; resumed from if it holds one")
    p.add_argument("--save-at", type=int, action="append", default=[], metavar="STEP",
                   help="write the commit after STEP to --checkpoint-dir")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--step-seconds", type=float, default=0.0,
                   help="make each step last at least this long (to watch a failure mid-run)")
    args = p.parse_args()
    growth = {}
    if args.max_ranks is not None:
        if not (args.hostfile or args.discovery):
            p.error("--max-ranks needs --hostfile or --discovery")
        growth = dict(max_ranks=args.max_ranks, discovery=discovery_of(args))

    world = world_rank()
    x, y = digits_as_mnist()
    paddle.seed(args.seed)  # elastic.run starts every rank from rank 0's parameters anyway
    with paddle.utils.unique_name.guard():  # the optimizer's saved state is keyed by these names
        model = paddle.nn.Sequential(paddle.nn.Linear(784, 64), paddle.nn.ReLU(), paddle.nn.Linear(64, 10))
    optimizer = paddle.optimizer.Adam(learning_rate=args.lr, parameters=model.parameters())
    state = elastic.State(model, optimizer, checkpoint_dir=args.checkpoint_dir, step=0)
    if args.checkpoint_dir and os.path.exists(os.path.join(args.checkpoint_dir, "latest")):
        state.load(args.checkpoint_dir)

    @elastic.run(min_ranks=args.min_ranks, **growth)
    def train(state):
        dp = paddle_ngraph.DataParallel(state.model)  # built here: it binds the current group
        rank, size = elastic.rank(), elastic.size()
        print(f"[world {world}] rank {rank} of {size} from step {state.step}", flush=True)
        while state.step < args.steps:
            began = time.monotonic()
            xb, yb = batch(x, y, state.step, args.global_batch, rank, size)
            loss = F.cross_entropy(dp(paddle.to_tensor(xb)), paddle.to_tensor(yb))
            loss.backward()
            state.optimizer.step()
            state.optimizer.clear_grad()
            if rank == 0 and (state.step % args.log_every == 0 or state.step == args.steps - 1):
                print(f"[rank 0] step {state.step} loss {float(loss):.8g} ({size} rank(s))", flush=True)
            state.step += 1
            if state.step % args.commit_every == 0 or state.step == args.steps:
                state.commit(save=state.step in args.save_at)  # every rank at the same step
            time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))

    train(state)
    print(f"[world {world}] final step {state.step} parameters sha256 {parameter_digest(state.model)}", flush=True)


if __name__ == "__main__":
    paddle.disable_static()
    main()

#!/usr/bin/env python
"""Step throughput of local SGD against synchronous data parallelism across rate-limited links.

Runs examples/fleet_mnist_mlp.py (SGD) on 2 hosts x 1 rank in network namespaces
(tools/netns_cluster.py, needs root), once per configuration and link, in interleaved rounds (the
order reversed every round) so that every configuration sees the same machine load. Each run
sets ``PADDLE_NGRAPH_LOCALSGD_K_STEPS`` (0: synchronous, a gradient AllReduce every step; k:
parameters averaged every k steps after ``PADDLE_NGRAPH_LOCALSGD_BEGIN_STEP``, default 1). The
figure is rank 0's global samples/s after --warmup steps: per configuration the median over the
rounds, with the range. Prints a Markdown table (and writes it to --out if given).

    tools/bench_localsgd.py --links 100mbit,1gbit --ks 0,4,8 --rounds 3
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import bench_netns  # noqa: E402  (tools/, the script's own folder)

def measure(k: int, link: str, args) -> float | None:
    """Samples/s of the fleet example with local SGD every k steps (0: synchronous), one rank per host."""
    return bench_netns.measure(args.hosts, 1, {"LOCALSGD_K_STEPS": k}, link, args)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--links", default="100mbit,1gbit", help="comma-separated tc rates of every host's link, or none")
    p.add_argument("--ks", default="0,4,8", help="localsgd_k_steps values; 0 = synchronous data parallelism")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--out", help="also write the Markdown table here")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of every run (e.g. PADDLE_NGRAPH_LOCALSGD_BEGIN_STEP=0); repeatable")
    args = p.parse_args()
    links, ks = args.links.split(","), [int(k) for k in args.ks.split(",")]
    configs = [(link, k) for link in links for k in ks]
    rates: dict = {c: [] for c in configs}
    for round_ in range(args.rounds):
        for link, k in (configs if round_ % 2 == 0 else configs[::-1]):
            started = time.monotonic()
            print(f"round {round_ + 1}/{args.rounds}: link {link}, k {k}...", end=" ", file=sys.stderr, flush=True)
            rate = measure(k, link, args)
            print(f"{'failed' if rate is None else f'{rate:.0f} samples/s'} ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr, flush=True)
            if rate is not None:
                rates[(link, k)].append(rate)

    def cell(link, k):
        runs = rates[(link, k)]
        if not runs:
            return "failed"
        median = statistics.median(runs)
        sync = rates.get((link, 0))
        speedup = f", x{median / statistics.median(sync):.1f}" if k and sync else ""
        return f"{median:.0f} ({min(runs):.0f}-{max(runs):.0f}{speedup})"

    label = lambda k: "synchronous (gradient AllReduce every step)" if k == 0 else f"localsgd_k_steps {k}"  # noqa: E731
    header = (f"| mnist_mlp, SGD, {args.hosts} hosts x 1 rank, batch {args.batch_size} per rank | "
              + " | ".join(f"link {link}" for link in links) + " |\n| --- | " + " | ".join("---" for _ in links) + " |")
    rows = [f"| {label(k)} | " + " | ".join(cell(link, k) for link in links) + " |" for k in ks]
    table = "\n".join([header, *rows])
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()

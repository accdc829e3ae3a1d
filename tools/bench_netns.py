#!/usr/bin/env python
"""Throughput of examples/fleet_mnist_mlp.py across network namespaces (tools/netns_cluster.py),
with and without tc limits on the links: scaling, hierarchy, bucket size and compression.

Every configuration is one mpirun job of --steps steps; the figure is rank 0's global samples/s
after --warmup steps; in parentheses the scaling efficiency, samples/s / (ranks x one rank's
samples/s without network). Needs root. Prints a Markdown table (and writes it to --out if given).

    tools/bench_netns.py --steps 200 --links none,10gbit,1gbit
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "netns_cluster.py")
RATE = re.compile(r"\[rank 0\] ([0-9.]+) samples/s")

# (label, hosts, ranks per host, ngraph config through the environment)
LAYOUTS = [
    ("2 hosts x 1 rank", 2, 1, {}),
    ("2 hosts x 2 ranks, hierarchical on", 2, 2, {"HIERARCHICAL": "on"}),
    ("2 hosts x 2 ranks, hierarchical off", 2, 2, {"HIERARCHICAL": "off"}),
    ("2 hosts x 1 rank, bucket_mb 0 (one allreduce per gradient)", 2, 1, {"BUCKET_MB": "0"}),
    ("2 hosts x 1 rank, one 32 MB bucket (min_buckets 1)", 2, 1, {"BUCKET_MB": "32", "MIN_BUCKETS": "1"}),
    ("2 hosts x 1 rank, compress bf16", 2, 1, {"COMPRESS": "bf16"}),
]


def measure(hosts, ranks, config, link, args) -> float | None:
    cmd = [sys.executable, TOOL, "--hosts", str(hosts), "--ranks-per-host", str(ranks)]
    if link != "none":
        rate, _, delay = link.partition("/")
        cmd += ["--rate", rate] + (["--delay", delay] if delay else [])
    for key, value in config.items():
        cmd += ["--env", f"PADDLE_NGRAPH_{key}={value}"]
    for item in args.env:
        cmd += ["--env", item]
    cmd += ["--", "--steps", str(args.steps), "--warmup", str(args.warmup), "--log-every", str(10 ** 9),
            "--batch-size", str(args.batch_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=quiet_env(PYTHONPATH=ROOT))
    found = RATE.search(proc.stdout)
    if proc.returncode != 0 or not found:
        print(f"\nfailed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-1500:]}", file=sys.stderr, flush=True)
        return None
    return float(found.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--links", default="none,10gbit,1gbit",
                   help="comma-separated RATE or RATE/DELAY of every host's link (delay needs netem), or none")
    p.add_argument("--repeat", type=int, default=1, help="runs per configuration; the best is kept")
    p.add_argument("--out", help="also write the Markdown table here")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of every run, the baseline's too (e.g. PADDLE_NGRAPH_THREADS=1); repeatable")
    args = p.parse_args()

    links = args.links.split(",")
    done, total = 0, 1 + len(LAYOUTS) * len(links)

    def best(label, hosts, ranks, config, link):
        # One line per configuration: what runs now, completed with its result when it is done.
        nonlocal done
        done += 1
        print(f"[{done}/{total}] {label} [{link}]...", end=" ", file=sys.stderr, flush=True)
        started = time.monotonic()
        runs = [measure(hosts, ranks, config, link, args) for _ in range(args.repeat)]
        runs = [r for r in runs if r is not None]
        rate = max(runs) if runs else None
        print(f"{'failed' if rate is None else f'{rate:.0f} samples/s'} ({time.monotonic() - started:.0f} s)",
              file=sys.stderr, flush=True)
        return rate

    baseline = best("1 host x 1 rank", 1, 1, {}, "none")
    rows = []
    for label, hosts, ranks, config in LAYOUTS:
        cells = []
        for link in links:
            rate = best(label, hosts, ranks, config, link)
            if rate is None or not baseline:
                cells.append("failed")
            else:
                efficiency = rate / (hosts * ranks * baseline)
                cells.append(f"{rate:.0f} ({efficiency:.0%})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    header = (f"| layout (mnist_mlp, batch {args.batch_size} per rank) | " + " | ".join(f"link {l}" for l in links) + " |\n"
              + "| --- | " + " | ".join("---" for _ in links) + " |")
    table = "\n".join([f"1 host x 1 rank (no network): {baseline:.0f} samples/s" if baseline else "baseline failed",
                       "", header, *rows])
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()

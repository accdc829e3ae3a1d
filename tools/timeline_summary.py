#!/usr/bin/env python
"""Summarizes a PADDLE_NGRAPH_TIMELINE trace: per bucket, how much of its transfer the compute
thread's kernels overlapped, and how long the compute thread waited for it.

    python tools/timeline_summary.py trace.rank0.json [trace.rank1.json ...]

Per bucket, medians over the steps in the file: how long it waited to be picked up by the
communication thread after its pack (queued), the transfer there (an MPI allreduce also waits in it
for the other ranks to join), the part of the transfer during which the compute thread ran kernels
(hidden) and its share, and the Wait step. Then per step:
kernel time, pack time, wait time and the step's span on the compute thread.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

NOT_KERNELS = ("pack", "wait", "transfer", "step")


def _overlap(begin: float, end: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, e) - max(begin, b)) for b, e in spans)


def summarize(trace: dict) -> dict:
    """{"buckets": {bucket: medians in us}, "steps": medians in us} of one rank's trace."""
    thread = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    compute = {tid for tid, name in thread.items() if name == "compute"}
    by_step = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_step[(e["args"]["engine"], e["args"]["step"])].append(e)
    buckets = defaultdict(lambda: defaultdict(list))
    steps = defaultdict(list)
    for events in by_step.values():
        on_compute = [e for e in events if e["tid"] in compute]
        kernels = [(e["ts"], e["ts"] + e["dur"]) for e in on_compute if e["cat"] not in NOT_KERNELS]
        packed = {e["args"]["bucket"]: e["ts"] + e["dur"] for e in on_compute if e["cat"] == "pack"}
        for e in events:
            bucket = e["args"].get("bucket")
            if e["cat"] == "transfer" and e["tid"] not in compute:  # the interpreter transfers inline
                hidden = _overlap(e["ts"], e["ts"] + e["dur"], kernels)
                buckets[bucket]["transfer_us"].append(e["dur"])
                buckets[bucket]["hidden_us"].append(hidden)
                buckets[bucket]["bytes"].append(e["args"]["bytes"])
                if bucket in packed:  # handed over -> the communication thread starts on it
                    buckets[bucket]["queued_us"].append(max(0.0, e["ts"] - packed[bucket]))
            elif e["cat"] == "wait":
                buckets[bucket]["wait_us"].append(e["dur"])
        if on_compute:
            steps["kernels_us"].append(sum(e - b for b, e in kernels))
            steps["pack_us"].append(sum(e["dur"] for e in on_compute if e["cat"] == "pack"))
            steps["wait_us"].append(sum(e["dur"] for e in on_compute if e["cat"] == "wait"))
            steps["compute_thread_span_us"].append(max(e["ts"] + e["dur"] for e in on_compute)
                                                   - min(e["ts"] for e in on_compute))
    median = {k: {name: statistics.median(v) for name, v in values.items()} for k, values in buckets.items()}
    for values in median.values():
        values["hidden_share"] = values["hidden_us"] / values["transfer_us"] if values["transfer_us"] else 1.0
    return {"buckets": median, "steps": {k: statistics.median(v) for k, v in steps.items()},
            "num_steps": len(by_step)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    args = p.parse_args(argv)
    for path in args.traces:
        with open(path) as f:
            summary = summarize(json.load(f))
        print(f"{path}: {summary['num_steps']} steps (medians)")
        print(f"  {'bucket':<24} {'bytes':>10} {'queued us':>10} {'transfer us':>12} {'hidden us':>10} "
              f"{'hidden':>7} {'wait us':>9}")
        for bucket, v in sorted(summary["buckets"].items()):
            print(f"  {bucket:<24} {int(v['bytes']):>10} {v.get('queued_us', 0.0):>10.1f} {v['transfer_us']:>12.1f} "
                  f"{v['hidden_us']:>10.1f} {v['hidden_share']:>7.0%} {v.get('wait_us', 0.0):>9.1f}")
        print("  per step: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["steps"].items()))


if __name__ == "__main__":
    main()

"""Scaling mode of tools/bench.py (``--scaling``): how much a second rank adds, measured so it can be trusted
on a small shared machine.

One rank with one compute thread against N ranks with one compute thread each (OMP_NUM_THREADS=1,
PADDLE_NGRAPH_THREADS=1 for the engine, torch's and Paddle's intra-op pools at one thread), so the N-rank
run has exactly N times the cores of the one-rank run and nothing else changes. The configurations run
in interleaved rounds: each round runs every configuration once (a fresh job each, one timed repeat),
so a noisy minute hits every configuration alike. The efficiency of a round is
samples/s(N ranks) / (N * samples/s(1 rank)) with both runs taken from that round; the report gives its
median and spread over rounds.

Systems: ngraph-cpu (mpirun, the MPI transport), ngraph-ccl (paddle.distributed.launch, oneCCL; its one-rank
reference is ngraph-cpu on one rank: the same engine in one process), torch-ddp (torchrun; one rank is
plain torch without DDP), paddle-dp and the ngraph-dygraph systems. Each N-rank system is compared with
its own one-rank run.
"""
import sys
import time

import numpy as np

SCALING_SYSTEMS = ["ngraph-cpu", "ngraph-ccl", "torch-ddp"]


def reference_system(system: str) -> str:
    """The system whose one-rank run is the reference of ``system``'s N-rank runs."""
    return {"ngraph-ccl": "ngraph-cpu", "ngraph-dygraph-fleet": "ngraph-dygraph"}.get(system, system)


def run_scaling(models, systems, ranks, args, run_once, unsupported) -> dict:
    """Interleaved rounds of every (model, system, rank count) configuration, plus each system's reference
    on one rank; returns the report's "scaling" section."""
    n_ranks = [n for n in ranks if n > 1] or [2]
    configs = []
    for model in models:
        for system in systems:
            for n in [1] + n_ranks:
                config = (model, reference_system(system) if n == 1 else system, n)
                if config not in configs:
                    configs.append(config)
    skipped = {}
    for model, system, n in list(configs):
        reason = unsupported(system, model, n)
        if reason:
            skipped[(model, system, n)] = reason
            configs.remove((model, system, n))
    runs = interleaved_rounds(configs, args.rounds, lambda c: f"{c[0]} {c[1]} {c[2]} rank(s)",
                              lambda c: run_once(c[1], c[0], c[2], args, threads=1))
    rows = []
    for model in models:
        for system in systems:
            for n in n_ranks:
                row = {"model": model, "system": system, "ranks": n}
                key, base_key = (model, system, n), (model, reference_system(system), 1)
                reason = skipped.get(key) or skipped.get(base_key)
                if reason:
                    rows.append({**row, "status": "not run", "reason": reason})
                    continue
                row.update(summarize_scaling(runs[key], runs[base_key], n, args.batch))
                rows.append(row)
    return {"rounds": args.rounds, "threads_per_rank": 1, "rows": rows}


def interleaved_rounds(jobs, rounds: int, label, run) -> dict:
    """Runs every job once per round, ``rounds`` times, printing progress on stderr (``label(job)``, then
    the outcome); returns job -> its results, one per round. Shared by the scaling and precision modes."""
    results = {job: [] for job in jobs}
    for round_index in range(rounds):
        for done, job in enumerate(jobs, start=1):
            print(f"[round {round_index + 1}/{rounds}, {done}/{len(jobs)}] {label(job)}...", end=" ", file=sys.stderr,
                  flush=True)
            started = time.monotonic()
            result = run(job)
            if result["status"] == "ok":
                print(f"{result['ms_per_step']:.2f} ms/step ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                      flush=True)
            else:
                print(f"{result['status']}: {result['reason'][-200:]}", file=sys.stderr, flush=True)
            results[job].append(result)
    return results


def paired_rounds(runs, other_runs) -> tuple[list, dict | None]:
    """The rounds in which both jobs ran, as (run, other) pairs; if there is none, also the report row
    of the failure (the first job that failed, with its reason)."""
    pairs = [(r, o) for r, o in zip(runs, other_runs) if r["status"] == "ok" and o["status"] == "ok"]
    if pairs:
        return pairs, None
    failed = next((r for r in list(runs) + list(other_runs) if r["status"] != "ok"), None)
    return [], {"status": "failed", "reason": failed["reason"] if failed else "no run"}


def summarize_scaling(runs, base_runs, n, batch) -> dict:
    pairs, failure = paired_rounds(runs, base_runs)
    if failure:
        return failure
    ms = [r["ms_per_step"] for r, _ in pairs]
    base_ms = [b["ms_per_step"] for _, b in pairs]
    # samples/s: n * batch / ms against batch / base_ms, so efficiency = base_ms / ms per round.
    efficiency = [b / r for r, b in zip(ms, base_ms)]
    return {"status": "ok", "rounds_ok": len(pairs), "ms_per_step": float(np.median(ms)),
            "ms_spread": [float(min(ms)), float(max(ms))], "base_ms_per_step": float(np.median(base_ms)),
            "base_ms_spread": [float(min(base_ms)), float(max(base_ms))],
            "samples_per_s": n * batch * 1e3 / float(np.median(ms)), "base_samples_per_s": batch * 1e3 / float(
                np.median(base_ms)), "efficiency": float(np.median(efficiency)),
            "efficiency_spread": [float(min(efficiency)), float(max(efficiency))],
            "comm_share": float(np.median([r["comm_share"] for r, _ in pairs if "comm_share" in r]))
            if any("comm_share" in r for r, _ in pairs) else None,
            "hidden_share": float(np.median([r["hidden_share"] for r, _ in pairs if "hidden_share" in r]))
            if any("hidden_share" in r for r, _ in pairs) else None}


def scaling_lines(section: dict) -> list[str]:
    """The scaling table as Markdown lines."""
    lines = [f"Scaling: one rank with one thread against N ranks with one thread each; {section['rounds']} "
             "interleaved rounds, medians and min-max over rounds.", "",
             "| model | system | ranks | ms/step (spread) | 1 rank ms/step (spread) | samples/s | efficiency (spread) "
             "| comm share | hidden |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in section["rows"]:
        if row["status"] != "ok":
            lines.append(f"| {row['model']} | {row['system']} | {row['ranks']} | {row['status']}: "
                         f"{row['reason'][:120]} | | | | | |")
            continue
        comm = f"{100 * row['comm_share']:.0f}%" if row.get("comm_share") is not None else ""
        hidden = f"{100 * row['hidden_share']:.0f}%" if row.get("hidden_share") is not None else ""
        lines.append(f"| {row['model']} | {row['system']} | {row['ranks']} | {row['ms_per_step']:.2f} "
                     f"({row['ms_spread'][0]:.2f}-{row['ms_spread'][1]:.2f}) | {row['base_ms_per_step']:.2f} "
                     f"({row['base_ms_spread'][0]:.2f}-{row['base_ms_spread'][1]:.2f}) | {row['samples_per_s']:.0f} | "
                     f"{row['efficiency']:.2f} ({row['efficiency_spread'][0]:.2f}-{row['efficiency_spread'][1]:.2f}) "
                     f"| {comm} | {hidden} |")
    return lines

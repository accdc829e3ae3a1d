"""Model-parallel mode of tools/bench.py (``--mp``): what tensor parallelism costs and saves on the
transformer block of examples/tensor_parallel_transformer.py, against data parallelism and one process.

Three setups train the same model (Adam, the example's initial weights and data) on the same global
batch, each on the CPU backend:

  one process   the dense model, the whole batch                                 (1 rank)
  dp=2          the dense model on each rank, half the batch each; gradients averaged (2 ranks, mpirun)
  mp=2          each rank half of the model (split's parallel layers), the whole batch (2 ranks, mpirun)

They run in interleaved rounds (each round starts every setup once, a fresh job each), so a noisy
minute of the shared machine hits every setup alike; the report gives per setup the median step time
over rounds (a step lasts as long as its slowest rank's median step) with its spread (min-max), the
median over rounds of its step time over the one process's of the same round (with its spread), and
per rank: the bytes of the parameters and of the optimizer state in its scope, the CPU backend's
arena (its memory plan's peak of intermediate values), and the peak RSS. The communication share
comes from the timeline (backends/timeline.py, PADDLE_NGRAPH_TIMELINE): per step, the collectives'
transfers on the communication thread (summed) and the compute thread's waits for them, each over the
compute thread's span of the step; medians over the traced steps, the larger rank's. The last column
is the loss after the last timed step (rank 0's; dp=2: the mean of the ranks' halves), which the
three setups share up to rounding.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE_DIR = os.path.join(os.path.dirname(HERE), "examples")
# label -> (ranks, mp_degree)
MP_SETUPS = {"one process": (1, 1), "dp=2": (2, 1), "mp=2": (2, 2)}
# The model: the example's block, wider than its defaults so that a step is not all overhead.
MODEL_DEFAULTS = {"vocab": 1024, "dim": 256, "heads": 8, "ffn": 1024, "seq_len": 32, "global_batch": 16}
SMOKE_MODEL = {"vocab": 16, "dim": 16, "heads": 2, "ffn": 32, "seq_len": 4, "global_batch": 4}


def add_options(parser: argparse.ArgumentParser):
    parser.add_argument("--mp", action="store_true",
                        help="model-parallel mode: the tensor-parallel transformer example's model, mp=2 against "
                             "dp=2 and one process on the same global batch, --rounds interleaved rounds "
                             "(see tools/bench_mp.py)")
    for key, value in MODEL_DEFAULTS.items():
        parser.add_argument(f"--mp-{key.replace('_', '-')}", type=int, default=None,
                            help=f"with --mp: the model's {key.replace('_', ' ')} (default {value})")


def model_of(args) -> dict:
    chosen = SMOKE_MODEL if args.smoke else MODEL_DEFAULTS
    return {k: getattr(args, f"mp_{k}") if getattr(args, f"mp_{k}") is not None else v for k, v in chosen.items()}


# --- one rank ------------------------------------------------------------------------------------------
def mp_worker(args) -> dict:
    """One rank of one setup: builds the example's model (sharded with mp_degree > 1) under fleet with
    strategy.ngraph, trains --warmup then --steps steps timed, and reports its step time, memory and
    the communication share of its timeline."""
    import numpy as np
    import paddle
    import paddle.distributed.fleet as fleet

    import paddle_ngraph  # noqa: F401  # strategy.ngraph
    from paddle_ngraph.transpiler import engines

    sys.path.insert(0, EXAMPLE_DIR)
    import tensor_parallel_transformer as example

    sizes = json.loads(args.mp_model)
    mp = int(args.mp_degree)
    paddle.enable_static()
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": "CPU"}
    if mp > 1:
        strategy.tensor_parallel = True
        strategy.tensor_parallel_configs = {"tensor_parallel_degree": mp}
    fleet.init(is_collective=True, strategy=strategy)
    rank, nranks = fleet.worker_index(), fleet.worker_num()
    dp, dp_rank = nranks // mp, rank // mp
    whole = argparse.Namespace(vocab=sizes["vocab"], dim=sizes["dim"], heads=sizes["heads"], ffn=sizes["ffn"],
                               seq_len=sizes["seq_len"], batch_size=sizes["global_batch"], seed=1, lr=1e-3)
    local = argparse.Namespace(**{**vars(whole), "batch_size": whole.batch_size // dp})
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            _, _, loss = example.build(local, mp, rank % mp)
            fleet.distributed_optimizer(paddle.optimizer.Adam(whole.lr)).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feeds = []
        for step in range(4):
            tokens, targets = example.batch(whole, step)
            rows = slice(dp_rank * local.batch_size, (dp_rank + 1) * local.batch_size)
            feeds.append({"ids": tokens[rows], "labels": targets.reshape(whole.batch_size, -1)[rows].reshape(-1, 1)})
        times, value = [], None
        for step in range(args.warmup + args.steps):
            started = time.perf_counter()
            value, = exe.run(main, feed=feeds[step % 4], fetch_list=[loss])
            if step >= args.warmup:
                times.append(time.perf_counter() - started)
        params, state = persistable_bytes(main)
    engine = engines()[-1]
    result = {"rank": rank, "ms_per_step": 1e3 * float(np.median(times)), "loss": float(value),
              "param_bytes": params, "state_bytes": state, "peak_rss_mb": peak_rss_mb(),
              "arena_bytes": engine.executable.peak_bytes}
    if engine.timeline is not None:
        engine.timeline.write()
        result.update(comm_shares(engine.timeline.path))
    return result


def persistable_bytes(program) -> tuple[int, int]:
    """(parameters, everything else persistable: Adam's moments and powers of beta, the learning
    rate) in bytes, as this rank's scope holds them."""
    import numpy as np
    import paddle

    scope, params, state = paddle.static.global_scope(), 0, 0
    for var in program.list_vars():
        if not var.persistable or var.type != paddle.base.core.VarDesc.VarType.DENSE_TENSOR:
            continue
        found = scope.find_var(var.name)
        if found is None or not found.get_tensor()._is_initialized():
            continue
        nbytes = np.array(found.get_tensor()).nbytes
        if isinstance(var, paddle.base.framework.Parameter):
            params += nbytes
        else:
            state += nbytes
    return params, state


def comm_shares(trace_path: str) -> dict:
    """The medians over the traced steps of (the collectives' transfers, the compute thread's waits
    for them), each over the compute thread's span of the step."""
    with open(trace_path) as f:
        trace = json.load(f)
    compute = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
               and e["args"]["name"] == "compute"}
    steps: dict = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            steps.setdefault((e["args"]["engine"], e["args"]["step"]), []).append(e)
    comm, wait = [], []
    for events in steps.values():
        on_compute = [e for e in events if e["tid"] in compute]
        if not on_compute:
            continue
        span = max(e["ts"] + e["dur"] for e in on_compute) - min(e["ts"] for e in on_compute)
        comm.append(sum(e["dur"] for e in events if e["cat"] == "transfer" and e["tid"] not in compute) / span)
        wait.append(sum(e["dur"] for e in on_compute if e["cat"] == "wait") / span)
    return {"comm_share": statistics.median(comm), "wait_share": statistics.median(wait),
            "traced_steps": len(comm)} if comm else {}


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- the rounds ----------------------------------------------------------------------------------------
def run_job(label: str, args, launch_command, quiet_env) -> dict:
    """One fresh job of setup ``label``; its ranks' results, or the reason it failed."""
    ranks, mp = MP_SETUPS[label]
    with tempfile.TemporaryDirectory() as tmp:
        worker_args = ["--system", "ngraph-mp", "--mp-degree", str(mp), "--mp-model", json.dumps(model_of(args)),
                       "--steps", str(args.steps), "--warmup", str(args.warmup), "--result-dir", tmp]
        cmd = launch_command("ngraph-cpu", ranks, worker_args, os.path.join(tmp, "log"))
        env = quiet_env(OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // ranks)),
                        PADDLE_NGRAPH_TIMELINE=os.path.join(tmp, "trace.json"),
                        PADDLE_NGRAPH_TIMELINE_STEPS=str(args.steps))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"status": "failed", "reason": f"timed out after {args.timeout} s"}
        results = sorted((json.load(open(os.path.join(tmp, f))) for f in os.listdir(tmp) if f.startswith("rank")),
                         key=lambda r: r["rank"])
        if proc.returncode != 0 or len(results) != ranks:
            tail = (proc.stderr + proc.stdout).strip().splitlines()[-6:]
            return {"status": "failed", "reason": " | ".join(tail)}
    return {"status": "ok", "ranks": results}


def run_mp(args, launch_command, quiet_env, interleaved_rounds) -> dict:
    """Every setup once per round, ``args.rounds`` rounds; returns the report's "mp" section."""
    def run(label):
        job = run_job(label, args, launch_command, quiet_env)
        if job["status"] == "ok":  # a step lasts as long as the slowest rank's
            job["ms_per_step"] = max(r["ms_per_step"] for r in job["ranks"])
        return job

    runs = interleaved_rounds(list(MP_SETUPS), args.rounds, lambda label: label, run)
    single = runs["one process"]
    rows = []
    for label, jobs in runs.items():
        ranks, mp = MP_SETUPS[label]
        ok = [j for j in jobs if j["status"] == "ok"]
        if not ok:
            rows.append({"setup": label, "status": "failed", "reason": jobs[0]["reason"]})
            continue
        ms = [j["ms_per_step"] for j in ok]
        # Each round against the one process of the same round: the load of the moment cancels.
        ratios = [j["ms_per_step"] / b["ms_per_step"] for j, b in zip(jobs, single)
                  if j["status"] == "ok" and b["status"] == "ok"]
        last = ok[-1]["ranks"]

        def over_rounds(key, ok=ok):  # median over rounds of the larger rank's value
            values = [max(r[key] for r in j["ranks"]) for j in ok if all(key in r for r in j["ranks"])]
            return statistics.median(values) if values else None

        rows.append({"setup": label, "status": "ok", "ranks": ranks, "mp_degree": mp, "rounds_ok": len(ok),
                     "ms_per_step": statistics.median(ms), "ms_spread": [min(ms), max(ms)], "ms_rounds": ms,
                     "vs_one_process": statistics.median(ratios) if ratios else None,
                     "vs_one_process_spread": [min(ratios), max(ratios)] if ratios else None,
                     "param_bytes": max(r["param_bytes"] for r in last),
                     "state_bytes": max(r["state_bytes"] for r in last),
                     "arena_bytes": max((r["arena_bytes"] or 0) for r in last),
                     "peak_rss_mb": max(r["peak_rss_mb"] for j in ok for r in j["ranks"]),
                     "comm_share": over_rounds("comm_share"), "wait_share": over_rounds("wait_share"),
                     "loss": statistics.mean(r["loss"] for r in last)})
    return {"rounds": args.rounds, "steps": args.steps, "model": model_of(args), "rows": rows}


def mp_header(section: dict, machine: str, date: str) -> str:
    m = section["model"]
    return (f"Run {date} on {machine}; the transformer block of examples/tensor_parallel_transformer.py "
            f"(vocabulary {m['vocab']}, width {m['dim']}, {m['heads']} heads, MLP {m['ffn']}, sequence "
            f"{m['seq_len']}), Adam, global batch {m['global_batch']}, CPU backend; {section['rounds']} "
            f"interleaved rounds, each a fresh job per setup timing {section['steps']} steps.")


def mp_lines(section: dict) -> list[str]:
    """The table as Markdown lines."""
    mib = lambda n: f"{n / 2**20:.2f}"  # noqa: E731
    lines = ["| setup | ranks | ms/step (spread) | / one process (spread) | params MiB/rank | optimizer state MiB/rank | arena MiB/rank "
             "| peak RSS MiB | comm share | waited | loss |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in section["rows"]:
        if row["status"] != "ok":
            lines.append(f"| {row['setup']} | | {row['status']}: {row['reason'][:160]} | | | | | | | | |")
            continue
        share = lambda v: "" if v is None else f"{100 * v:.0f}%"  # noqa: E731
        ratio = "" if row["vs_one_process"] is None else (
            f"{row['vs_one_process']:.2f} ({row['vs_one_process_spread'][0]:.2f}-{row['vs_one_process_spread'][1]:.2f})")
        lines.append(f"| {row['setup']} | {row['ranks']} | {row['ms_per_step']:.1f} ({row['ms_spread'][0]:.1f}-"
                     f"{row['ms_spread'][1]:.1f}) | {ratio} | {mib(row['param_bytes'])} | {mib(row['state_bytes'])} | "
                     f"{mib(row['arena_bytes'])} | {row['peak_rss_mb']:.0f} | {share(row['comm_share'])} | "
                     f"{share(row['wait_share'])} | {row['loss']:.4f} |")
    return lines

"""PADDLE_NGRAPH_TIMELINE: a Chrome trace per rank of real training steps, on both backends."""
import json
import os
import subprocess
import sys

import pytest

from paddle_ngraph.backends.timeline import rank_path, timeline_from_env
from paddle_ngraph.errors import ConfigError

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "timeline_worker.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

from ranks import run_ranks  # noqa: E402
from timeline_summary import summarize  # noqa: E402

STEPS = 5
KEPT = 3  # PADDLE_NGRAPH_TIMELINE_STEPS: the last 3 of the 5 steps stay in the trace
SLACK_US = 1.0  # the trace's timestamps are floats of microseconds: allow rounding


def run_worker(tmp_path, backend: str, nranks: int):
    env = {"PADDLE_NGRAPH_TIMELINE": str(tmp_path / "trace.json"), "PADDLE_NGRAPH_TIMELINE_STEPS": str(KEPT),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    args = (backend, STEPS, tmp_path / "meta")
    if nranks == 1:
        proc = subprocess.run([sys.executable, WORKER, *map(str, args)], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, **env))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    else:
        run_ranks(WORKER, nranks, *args, timeout=120, env=env)
    traces = []
    for rank in range(nranks):
        with open(rank_path(str(tmp_path / "trace.json"), rank, nranks)) as f:
            trace = json.load(f)
        with open(tmp_path / f"meta.rank{rank}") as f:
            traces.append((trace, json.load(f)))
    return traces


def complete_events(trace, rank):
    assert isinstance(trace["traceEvents"], list)
    events = []
    for e in trace["traceEvents"]:
        assert e["pid"] == rank and isinstance(e["tid"], int)
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "X":
            assert {"name", "cat", "ts", "dur", "args"} <= set(e) and e["dur"] >= 0, e
            events.append(e)
    return events


def thread_names(trace):
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def check_trace(trace, meta, backend):
    rank, engine = meta["rank"], meta["engine"]
    events = complete_events(trace, rank)
    names = thread_names(trace)
    compute_tid = next(t for t, n in names.items() if n == "compute")
    comm_tid = next(t for t, n in names.items() if n == f"communication (engine {engine})")
    steps = sorted({e["args"]["step"] for e in events})
    assert steps == list(range(STEPS - KEPT, STEPS))  # bounded: only the last KEPT steps

    previous_end = -1.0
    for step in steps:
        mine = [e for e in events if e["args"]["step"] == step]
        on_compute = sorted((e for e in mine if e["tid"] == compute_tid), key=lambda e: e["ts"])
        # One thread runs one thing at a time: its spans follow each other, and steps follow steps.
        for before, after in zip(on_compute, on_compute[1:]):
            assert before["ts"] + before["dur"] <= after["ts"] + SLACK_US, (before, after)
        assert on_compute[0]["ts"] >= previous_end - SLACK_US
        previous_end = max(e["ts"] + e["dur"] for e in mine)

        kernels = [e for e in on_compute if e["cat"] not in ("pack", "wait", "transfer")]
        assert sorted(e["name"] for e in kernels) == meta["kernels"]  # every node once, nothing else
        updates = [e for e in kernels if e["cat"] == "update"]
        assert len(updates) == meta["params"]
        assert {"MatMul", "Relu"} & {e["cat"] for e in kernels}, {e["cat"] for e in kernels}

        transfer_tid = compute_tid if backend == "INTERPRETER" else comm_tid
        transfers = {e["args"]["bucket"]: e for e in mine if e["cat"] == "transfer"}
        assert sorted(transfers) == meta["buckets"]
        assert all(e["tid"] == transfer_tid and e["name"].startswith("AllReduce ") and e["args"]["bytes"] > 0
                   for e in transfers.values())
        if backend == "CPU":
            packs = {e["args"]["bucket"]: e for e in on_compute if e["cat"] == "pack"}
            waits = {e["args"]["bucket"]: e for e in on_compute if e["cat"] == "wait"}
            assert sorted(packs) == sorted(waits) == meta["buckets"]
            for bucket, transfer in transfers.items():
                pack, wait = packs[bucket], waits[bucket]
                assert bucket in wait["name"] and bucket in pack["name"]
                # Packed before handed over; the Wait returns only once the transfer is done.
                assert pack["ts"] + pack["dur"] <= transfer["ts"] + SLACK_US, (pack, transfer)
                assert transfer["ts"] + transfer["dur"] <= wait["ts"] + wait["dur"] + SLACK_US, (transfer, wait)
        assert sorted(set(meta["update_bucket"].values())) == meta["buckets"]
        for update in updates:
            bucket = meta["update_bucket"].get(update["name"])
            if bucket is not None:
                done = transfers[bucket]["ts"] + transfers[bucket]["dur"]
                assert update["ts"] >= done - SLACK_US, (update, transfers[bucket])
    return events


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["CPU", "INTERPRETER"])
def test_two_ranks_write_one_trace_each_with_the_buckets_overlap(tmp_path, backend):
    if backend == "CPU":
        pytest.importorskip("paddle_ngraph._cpu")
    traces = run_worker(tmp_path, backend, 2)
    for rank, (trace, meta) in enumerate(traces):
        assert meta["rank"] == rank and meta["size"] == 2 and len(meta["buckets"]) >= 2
        assert trace["otherData"]["rank"] == rank
        check_trace(trace, meta, backend)
        if backend == "CPU":  # tools/timeline_summary.py reads the same trace
            summary = summarize(trace)
            assert summary["num_steps"] == KEPT and sorted(summary["buckets"]) == meta["buckets"]
            for bucket in summary["buckets"].values():
                assert 0 <= bucket["hidden_us"] <= bucket["transfer_us"] + SLACK_US and bucket["wait_us"] >= 0
    assert not os.path.exists(tmp_path / "trace.json")  # with several ranks only the per-rank files


@pytest.mark.parametrize("backend", ["CPU", "INTERPRETER"])
def test_one_process_writes_the_path_itself(tmp_path, backend):
    if backend == "CPU":
        pytest.importorskip("paddle_ngraph._cpu")
    [(trace, meta)] = run_worker(tmp_path, backend, 1)
    assert meta["buckets"] == []  # one process: no AllReduce
    events = check_trace(trace, meta, backend)
    assert not [e for e in events if e["cat"] in ("pack", "wait", "transfer")]


def test_rank_path():
    assert rank_path("/tmp/trace.json", 3, 4) == "/tmp/trace.rank3.json"
    assert rank_path("/tmp/trace", 0, 2) == "/tmp/trace.rank0"
    assert rank_path("/tmp/trace.json", 0, 1) == "/tmp/trace.json"


def test_bad_settings_are_config_errors_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLE_NGRAPH_TIMELINE", str(tmp_path / "trace.json"))
    monkeypatch.setenv("PADDLE_NGRAPH_TIMELINE_STEPS", "0")
    with pytest.raises(ConfigError, match="PADDLE_NGRAPH_TIMELINE_STEPS"):
        timeline_from_env(0, 1)
    monkeypatch.setenv("PADDLE_NGRAPH_TIMELINE_STEPS", "5")
    monkeypatch.setenv("PADDLE_NGRAPH_TIMELINE", str(tmp_path / "missing" / "trace.json"))
    with pytest.raises(ConfigError, match="PADDLE_NGRAPH_TIMELINE=.*does not exist"):
        timeline_from_env(0, 1)


def test_collectives_over_groups_get_a_lane_per_group():
    """A rank of dp 2 x mp 2: the model's AllReduce over its model-parallel group {0, 1}, a gradient
    bucket over its data-parallel group {0, 2} and one of every rank: three communication lanes,
    each named by its group, each holding only its own group's transfers."""
    import numpy as np

    from paddle_ngraph.backends.timeline import Span, Timeline, collective_args
    from paddle_ngraph.ir import ops

    x = ops.Parameter(dtype="float32", shape=(4, 8), name="x").output()
    nodes = [ops.AllReduce(x, group=(0, 1)), ops.AllReduce(x, group=(0, 2), bucket="grad0"), ops.AllReduce(x)]
    assert collective_args(nodes[0])["group"] == [0, 1] and "group" not in collective_args(nodes[2])
    assert collective_args(nodes[1])["bytes"] == 4 * 8 * 4
    line = Timeline("/unused.json", rank=0, size=4)
    for step in range(2):
        spans = [Span(f"transfer {i}", "transfer", "comm", step + i / 10, step + i / 10 + 0.01, collective_args(n))
                 for i, n in enumerate(nodes)]
        line.add_step(7, step, spans + [Span("matmul", "MatMul", "compute", step, step + 0.05, {})])
    trace = {"traceEvents": line.events()}
    names = thread_names(trace)
    lanes = {e["args"].get("group") and tuple(e["args"]["group"]): e["tid"]
             for e in complete_events(trace, 0) if e["cat"] == "transfer"}
    assert names[lanes[(0, 1)]] == "communication (engine 7, group [0, 1])"
    assert names[lanes[(0, 2)]] == "communication (engine 7, group [0, 2])"
    assert names[lanes[None]] == "communication (engine 7)"
    assert len(set(lanes.values())) == 3
    per_lane = {}
    for e in complete_events(trace, 0):
        per_lane.setdefault(e["tid"], []).append(e["name"])
    assert per_lane[lanes[(0, 1)]] == ["transfer 0"] * 2 and per_lane[lanes[None]] == ["transfer 2"] * 2
    assert np.isclose(sum(e["dur"] for e in complete_events(trace, 0) if e["cat"] == "transfer"), 6 * 0.01 * 1e6)

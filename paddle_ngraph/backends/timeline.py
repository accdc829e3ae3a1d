"""The timeline: a Chrome trace (chrome://tracing, Perfetto) of the engine's steps, per rank.

``PADDLE_NGRAPH_TIMELINE=path.json`` turns it on (read once, at ``transpile``). Each step's
executable reports spans (see ``Span``): every kernel on the compute thread, each bucket's pack
and Wait there, each bucket's transfer on the communication thread, so that one can see how much
of the communication the backward compute hides. A collective over a group of ranks (tensor
parallelism: ir/groups.py) is drawn in a lane of its own per group, named by its ranks, beside the
lane of the job-wide collectives. With N > 1 ranks each rank writes its own file,
the rank inserted before the extension (``trace.json`` -> ``trace.rank0.json``); one rank writes
``path`` itself. The file is written at exit (and by ``write()``).

Memory is bounded: only the last ``PADDLE_NGRAPH_TIMELINE_STEPS`` steps (default 20) are kept,
the steady state rather than the first step, which compiles.

Timestamps are microseconds of the monotonic clock (CLOCK_MONOTONIC: std::chrono::steady_clock in
the native executor, ``time.monotonic`` here), which all processes of a host share: the files of
the ranks of one host line up when opened together.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
from collections import deque
from typing import NamedTuple

from ..errors import ConfigError

PATH_VARIABLE = "PADDLE_NGRAPH_TIMELINE"
STEPS_VARIABLE = "PADDLE_NGRAPH_TIMELINE_STEPS"
DEFAULT_STEPS = 20

# Thread ids in the trace. The native executor runs every kernel on one compute thread per process;
# each executable has its own communication thread, numbered after the engine. Collectives over a
# group of ranks get lanes of their own (numbered from GROUP_LANE_BASE in the order the groups are
# first seen): what runs over the model-parallel and the data-parallel groups shows apart.
PADDLE_THREAD = 0
COMPUTE_THREAD = 1
COMM_THREAD_BASE = 100
GROUP_LANE_BASE = 10_000


class Span(NamedTuple):
    """One complete event: ``thread`` is "compute" or "comm"; begin/end in monotonic seconds."""
    name: str
    cat: str
    thread: str
    begin: float
    end: float
    args: dict


class Spans:
    """Spans as described once and timed per step: a step only stores its times, the Span objects
    are made when the trace is written (this keeps the per-step cost of tracing at a list copy)."""
    __slots__ = ("descriptions", "times")

    def __init__(self, descriptions: list | None = None, times: list | None = None):
        self.descriptions = descriptions if descriptions is not None else []  # (name, cat, thread, args)
        self.times = times if times is not None else []  # (begin, end)

    def add(self, description: tuple, begin: float, end: float):
        """``description``: (name, cat, thread, args)."""
        self.descriptions.append(description)
        self.times.append((begin, end))

    def __iter__(self):
        for (name, cat, thread, args), (begin, end) in zip(self.descriptions, self.times):
            yield Span(name, cat, thread, begin, end, args)

    def __len__(self):
        return min(len(self.descriptions), len(self.times))


def rank_path(path: str, rank: int, size: int) -> str:
    """``trace.json`` -> ``trace.rank3.json`` with several ranks; the path itself with one."""
    if size <= 1:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def update_category(node) -> str | None:
    """The trace category of an optimizer update ("update"), else None."""
    from ..ir.ops.optimizer import OptimizerUpdate

    return "update" if isinstance(node, OptimizerUpdate) else None


def bucket_of(node) -> str:
    return node.attrs.get("bucket") or node.name


def collective_bytes(node) -> int:
    return sum(t.nbytes() for t in node.output_types)


def collective_args(node) -> dict:
    """A collective's span arguments: its bucket, bytes, op, and its group's ranks where it runs
    over a group (not every rank)."""
    args = {"bucket": bucket_of(node), "bytes": collective_bytes(node), "op": node.op_type}
    group = tuple(node.attrs.get("group") or ())
    if group:
        args["group"] = list(group)
    return args


class Timeline:
    """The spans of the last ``max_steps`` steps of this process, written as one Chrome trace."""

    def __init__(self, path: str, rank: int = 0, size: int = 1, max_steps: int = DEFAULT_STEPS):
        self.path = rank_path(path, rank, size)
        self.rank = rank
        self.size = size
        self.steps: deque = deque(maxlen=max_steps)  # (engine id, step number, iterables of Span)
        self._lock = threading.Lock()  # engines may step from Paddle's worker threads

    def add_step(self, engine_id: int, step: int, *spans):
        """Keeps the step's spans: iterables of Span (lists, Spans)."""
        with self._lock:
            self.steps.append((engine_id, step, spans))

    def events(self) -> list[dict]:
        with self._lock:
            steps = list(self.steps)
        pid = self.rank
        threads = {PADDLE_THREAD: "paddle (ngraph_engine op)", COMPUTE_THREAD: "compute"}
        group_lanes: dict = {}  # (engine id, group) -> tid
        events = []
        for engine_id, step, batches in steps:
            comm = COMM_THREAD_BASE + engine_id
            threads.setdefault(comm, f"communication (engine {engine_id})")
            tids = {"paddle": PADDLE_THREAD, "compute": COMPUTE_THREAD, "comm": comm}
            for s in (span for batch in batches for span in batch):
                tid = tids[s.thread]
                group = s.args.get("group")
                if s.thread == "comm" and group:
                    key = (engine_id, tuple(group))
                    if key not in group_lanes:
                        group_lanes[key] = GROUP_LANE_BASE + len(group_lanes)
                        threads[group_lanes[key]] = f"communication (engine {engine_id}, group {list(group)})"
                    tid = group_lanes[key]
                events.append({"name": s.name, "cat": s.cat, "ph": "X", "pid": pid, "tid": tid,
                               "ts": s.begin * 1e6, "dur": max(0.0, s.end - s.begin) * 1e6,
                               "args": {"step": step, "engine": engine_id, **s.args}})
        meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"rank {self.rank}"}},
                {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": self.rank}}]
        for tid, name in sorted(threads.items()):
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        return meta + events

    def write(self):
        trace = {"traceEvents": self.events(), "displayTimeUnit": "ms",
                 "otherData": {"rank": self.rank, "world_size": self.size, "clock": "monotonic"}}
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(trace, f)
        os.replace(tmp, self.path)  # a reader never sees half a file


_PROCESS_TIMELINE: Timeline | None = None


def timeline_from_env(rank: int, size: int) -> Timeline | None:
    """The process's timeline if PADDLE_NGRAPH_TIMELINE is set (one per process, shared by its
    engines, written at exit); None otherwise."""
    global _PROCESS_TIMELINE
    path = os.environ.get(PATH_VARIABLE)
    if not path:
        return None
    if _PROCESS_TIMELINE is not None:
        return _PROCESS_TIMELINE
    raw = os.environ.get(STEPS_VARIABLE, str(DEFAULT_STEPS))
    try:
        max_steps = int(raw)
    except ValueError:
        max_steps = 0
    if max_steps <= 0:
        raise ConfigError(f"{STEPS_VARIABLE}={raw!r}: expected a positive number of steps to keep")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{PATH_VARIABLE}={path!r}: directory '{directory}' does not exist")
    _PROCESS_TIMELINE = Timeline(path, rank, size, max_steps)
    atexit.register(_PROCESS_TIMELINE.write)
    return _PROCESS_TIMELINE

"""The stall watchdog: a bounded wait in every collective, and a report naming who is missing.

MPI and oneCCL collectives wait forever for a rank that never arrives: one that
was frozen (SIGSTOP, a swapped-out node, a debugger), that hangs in user code,
or that went down without its launcher noticing. Horovod's stall inspector only
warns. Ours bounds the wait (``timeout_s``) and then ends every rank with one
report.

Each rank runs two daemon threads:

- the *watchdog* samples this rank's position every ``interval`` seconds: which
  engine and step it is in, and how many of the step's collectives it has
  submitted and seen completed (the executables count them; the CPU backend's
  counters are atomics read while its step runs without the GIL). When a
  submitted collective has made no progress for ``timeout_s``, it reads every
  rank's last published position from the side channel, names the ranks that
  have not submitted that collective and the buckets they still owe, publishes
  the report so the other ranks print it too, and ends the job.
- the *publisher* writes the position to the side channel (a TCPStore on rank 0,
  side_channel.py) and polls the job's abort flag. Store calls can block if rank 0
  is frozen, so they never run on the watchdog thread; the report waits for them
  at most ``STORE_BUDGET_S`` and says so when rank 0 does not answer.

The job ends through the transport's abort (mpirun's MPI_Abort, else exiting
non-zero, which both launchers turn into the end of every rank).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field

from ..errors import TransportError
from .owned_store import before_closing

STORE_BUDGET_S = 5.0
_MAX_TENSOR_NAMES = 4


@dataclass
class Position:
    """Where a rank is. Ordered: a rank behind another in the same engine has a smaller key."""

    engine: int = 0
    step: int = -1           # the engine's step being run (or last run, when not in a step)
    in_step: bool = False
    phase: str = "idle"      # "input check", "start-up sync" (collectives before the function's) or "collectives"
    submitted: int = 0       # collectives of the step handed to the transport
    completed: int = 0
    labels: list = field(default_factory=list)  # the step's collectives, in submission order

    def outstanding(self) -> bool:
        return self.in_step and (self.phase != "collectives" or self.submitted > self.completed)

    def waiting_on(self) -> str:
        if self.phase != "collectives":
            return f"the {self.phase} of step {self.step} (before its buckets)"
        index = self.completed
        return self.labels[index] if index < len(self.labels) else f"collective {index} of step {self.step}"

    def signature(self) -> tuple:
        return (self.engine, self.step, self.in_step, self.phase, self.submitted, self.completed)

    def to_json(self, now: float) -> str:
        return json.dumps({"engine": self.engine, "step": self.step, "in_step": self.in_step, "phase": self.phase,
                           "submitted": self.submitted, "completed": self.completed, "time": now})


def bucket_label(bucket: str, tensor_names: list[str]) -> str:
    names = ", ".join(tensor_names[:_MAX_TENSOR_NAMES])
    if len(tensor_names) > _MAX_TENSOR_NAMES:
        names += f", ... ({len(tensor_names)} tensors)"
    return f"bucket '{bucket}' ({names})"


def _has_submitted(mine: Position, peer: dict) -> bool:
    """Whether ``peer`` has handed over the collective ``mine`` is blocked on (or gone past it)."""
    if peer["engine"] != mine.engine or peer["step"] < mine.step:
        return False
    if peer["step"] > mine.step or not peer["in_step"]:
        return True  # a later step, or this step finished
    if mine.phase != "collectives":
        return True  # waiting in the same input check or start-up sync, or past it
    return peer["phase"] == "collectives" and peer["submitted"] > mine.completed


def describe_missing(mine: Position, peers: dict[int, dict | None], now: float, interval: float) -> list[str]:
    """One phrase per rank that has not submitted the collective ``mine`` waits for: how long ago it
    was heard from, where it is, and the collectives of this step it still owes."""
    missing = []
    for rank, peer in sorted(peers.items()):
        if peer is None:
            missing.append(f"rank {rank} (never reported: it did not get as far as transpile)")
            continue
        if _has_submitted(mine, peer):
            continue
        age = now - peer["time"]
        # A rank publishes every `interval`: a frozen one's last report may predate its last steps.
        heard = (f"silent for {age:.1f} s: dead or frozen; its last report: " if age > 3 * interval + 1
                 else "alive; ")
        if peer["engine"] == mine.engine and peer["step"] == mine.step and peer["phase"] == "collectives":
            where = f"in step {mine.step}, {peer['submitted']} of {len(mine.labels)} collectives submitted"
            owed = mine.labels[peer["submitted"]:mine.submitted]
        else:
            state = "inside" if peer["in_step"] else "between steps, last in"
            where = (f"{state} step {peer['step']} of engine {peer['engine']}" if peer["engine"]
                     else "has not run a step yet")
            phase = mine.phase if mine.phase != "collectives" else "input check"
            owed = [f"the {phase} of step {mine.step}"] + mine.labels[:mine.submitted]
        missing.append(f"rank {rank} ({heard}{where}); not submitted: {'; '.join(owed)}")
    return missing


class Watchdog:
    def __init__(self, channel, transport, timeout_s: float, interval: float | None = None):
        self.channel = channel
        self.transport = transport
        self.rank, self.size = transport.rank, transport.size
        self.timeout_s = float(timeout_s)
        self.interval = interval or min(1.0, max(0.1, self.timeout_s / 10))
        self._position = Position()
        self._probe = None  # () -> (labels, submitted, completed) of the running step's executable
        self._lock = threading.Lock()
        self._published: str | None = None
        self._peer_abort: str | None = None
        self._stopped = threading.Event()
        self.channel.set(self._key(self.rank), self._position.to_json(time.time()))
        self.channel.add(self._started_key(self.rank), 1)
        self._threads = [threading.Thread(target=target, name=name, daemon=True)
                         for target, name in ((self._watch, "pdng-watchdog"), (self._publish, "pdng-watchdog-publisher"))]
        for thread in self._threads:
            thread.start()

    # --- called by the engine ------------------------------------------------------------------
    def enter_step(self, engine_id: int, step: int):
        with self._lock:
            self._position = Position(engine=engine_id, step=step, in_step=True, phase="input check")
            self._probe = None

    def set_phase(self, phase: str):
        with self._lock:
            self._position.phase = phase

    def start_collectives(self, probe):
        with self._lock:
            self._position.phase = "collectives"
            self._probe = probe

    def leave_step(self):
        with self._lock:
            self._position.in_step = False
            self._position.phase = "idle"
            self._probe = None

    def stop(self):
        """Ends the threads. At exit they must not be inside a store call: a daemon thread that
        is still in C++ when the interpreter finalizes can abort the process."""
        self._stopped.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(STORE_BUDGET_S + self.interval)

    # --- the threads -------------------------------------------------------------------------------
    def _sample(self) -> Position:
        with self._lock:
            position, probe = self._position, self._probe
            if probe is not None:
                labels, submitted, completed = probe()
                position.labels, position.submitted, position.completed = labels, submitted, completed
            return Position(**{**position.__dict__, "labels": list(position.labels)})

    def _watch(self):
        last_signature, since = None, time.monotonic()
        while not self._stopped.wait(self.interval):
            position = self._sample()
            self._published = position.to_json(time.time())
            if self._peer_abort:
                self._end(f"rank {self._peer_abort}")
            signature = position.signature()
            if signature != last_signature:
                last_signature, since = signature, time.monotonic()
            elif position.outstanding() and time.monotonic() - since > self.timeout_s:
                self._report(position, time.monotonic() - since)

    def _publish(self):
        while not self._stopped.wait(self.interval):
            try:
                if self._published is not None:
                    self.channel.set(self._key(self.rank), self._published)
                if self.channel.add("paddle_ngraph/abort", 0) > 0:
                    self._peer_abort = self.channel.get("paddle_ngraph/abort_report")
            except TransportError:
                pass  # rank 0 gone: the watchdog's own timeout still ends this rank

    def _report(self, position: Position, waited: float):
        report = (f"stall: rank {self.rank} has waited {waited:.1f} s (timeout_s {self.timeout_s:g}) in step "
                  f"{position.step} for {position.waiting_on()}")
        peers = self._read_peers()
        if peers is None:
            report += ("; the side channel (TCPStore on rank 0) does not answer within "
                       f"{STORE_BUDGET_S:g} s: rank 0 is dead or frozen")
        else:
            missing = describe_missing(position, peers, time.time(), self.interval)
            report += "; missing: " + (" | ".join(missing) if missing else
                                       "none by the last reports (a transport failure?)")
        self._stopped.set()
        self._say(report)
        if peers is not None:
            self._run_bounded(lambda: (self.channel.set("paddle_ngraph/abort_report", f"{self.rank} reported: {report}"),
                                       self.channel.add("paddle_ngraph/abort", 1)))
            # The abort ends every process at once: give the other ranks' publishers time to read the
            # report, so that each rank's log says why it stopped.
            time.sleep(2 * self.interval + 0.5)
        self.transport.end_job()

    def _read_peers(self) -> dict | None:
        def read():
            peers = {}
            for rank in range(self.size):
                if rank == self.rank:
                    continue
                peers[rank] = (json.loads(self.channel.get(self._key(rank)))
                               if self.channel.exists(self._started_key(rank)) else None)
            return peers

        return self._run_bounded(read)

    @staticmethod
    def _run_bounded(fn):
        """fn() on a helper thread; None if it fails or takes longer than STORE_BUDGET_S."""
        result = []

        def run():
            try:
                result.append(fn())
            except TransportError:
                pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(STORE_BUDGET_S)
        return result[0] if result else None

    def _end(self, report: str):
        self._stopped.set()
        self._say(report)
        self.transport.end_job()

    def _say(self, report: str):
        sys.stdout.flush()
        print(f"[rank {self.rank}] paddle_ngraph: aborting the job: {report}", file=sys.stderr, flush=True)

    @staticmethod
    def _key(rank: int) -> str:
        return f"paddle_ngraph/progress/{rank}"

    @staticmethod
    def _started_key(rank: int) -> str:
        return f"paddle_ngraph/started/{rank}"


_WATCHDOGS: dict[int, Watchdog] = {}


def _stop_all():
    for watchdog in _WATCHDOGS.values():
        watchdog.stop()


# At exit the watchdogs stop before the stores they publish to close.
before_closing(_stop_all)


def watchdog_for(transport, timeout_s: float) -> Watchdog:
    """The process's watchdog for ``transport``, started on first use. Collective (opens the side
    channel): every rank calls it at the same point, at transpile time."""
    from .side_channel import open_side_channel

    found = _WATCHDOGS.get(id(transport))
    if found is None:
        found = Watchdog(open_side_channel(transport, timeout_s), transport, timeout_s)
        _WATCHDOGS[id(transport)] = found
    else:
        found.timeout_s = min(found.timeout_s, float(timeout_s))
    return found

"""The engine behind one ``ngraph_engine`` operator: a compiled function and its bindings.

Per step it receives the operator's input buffers (in the order of the
function's parameters), checks the feeds, runs the executable, writes updated
parameters and optimizer state back into their buffers, and returns the values
the ops left to Paddle read.

Which compiled variant a step runs (one function; accumulation's micro-steps and apply steps;
local SGD's local and averaging steps) is the engine's ``Schedule`` (schedules.py).

With the fallback (``segments.py``) a program has several engines, one per segment. Values that
only later segments read are handed over in ``handover``, a dict the engines of one program share:
a segment's engine stores them after its step, a later one passes them to its executable as its
last parameters (``SegmentLinks``). Trailing ``order_inputs`` of the operator only order it after
other ops.

In one process with the plain schedule, a step of that full path leaves a plan of itself where the
backend makes one (the CPU backend's ``StepPlan``): later steps whose inputs have the same dtypes
and shapes run as one native call (Paddle calls the operator on its worker threads, where this
module's Python runs cold, 20-30 us a step); a step whose inputs differ takes the full path again.
"""
from __future__ import annotations

import hashlib
import itertools
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import ExecutionError
from ..ir import Function
from ..ir.ops.collective import COLLECTIVE_OPS
from ..ir.roles import FETCH_PREFIX
from ..ir.types import PADDLE_DATATYPE, PADDLE_DATATYPE_CODE, DType
from ..backends.base import check_input, write_back
from ..distributed.agreement import agree
from .schedules import Schedule, Variant

_ids = itertools.count(1)
_ENGINES: "weakref.WeakValueDictionary[int, Engine]" = weakref.WeakValueDictionary()


def engines() -> list["Engine"]:
    """The engines of this process (one per transpiled program), oldest first."""
    return [_ENGINES[k] for k in sorted(_ENGINES)]


def register_engine(engine) -> int:
    """Lists another kind of engine (a dygraph Layer's, dygraph/runner.py) in ``engines()``: it
    gets an id here and needs ``steps`` and ``updates``; the registry holds it weakly."""
    engine.id = next(_ids)
    _ENGINES[engine.id] = engine
    return engine.id


# Paddle's codes of the two index dtypes, each mapped to the other.
_INT32, _INT64 = PADDLE_DATATYPE_CODE[DType.int32], PADDLE_DATATYPE_CODE[DType.int64]
_OTHER_INDEX_CODE = {_INT32: _INT64, _INT64: _INT32}
_INT32_RANGE = np.iinfo(np.int32)


def index_feeds(function: Function, count: int) -> list[tuple[int, int, type]]:
    """(position, declared code, NumPy type) of the first ``count`` parameters that are int32 or
    int64 feeds: labels and indices, which a PIR program may be fed in the other of the two."""
    found = []
    for i, p in enumerate(function.parameters[:count]):
        dtype = p.output_types[0].dtype
        if p.attrs.get("role") == "feed" and dtype in (DType.int32, DType.int64):
            found.append((i, PADDLE_DATATYPE_CODE[dtype], dtype.numpy))
    return found


def convert_index_feeds(feeds, arrays, dtype_codes):
    """``arrays`` and ``dtype_codes`` with each int32 feed the function declares int64 (and each
    int64 feed it declares int32, when its values fit) converted to the declared dtype.

    Paddle's PIR executor hands a feed to the kernels in the dtype it was fed, not the one
    ``paddle.static.data`` declares, and its label and index kernels (cross_entropy_with_softmax,
    gather, embedding, ...) dispatch on the dtype they get: int32 labels fed to an int64 ``data``
    train there. The engine's kernels take the declared dtype; a label's copy costs little. (The
    legacy executor refuses such feeds itself, before the engine.) An int64 feed with values
    outside int32 stays as it is, for ``check_inputs`` to refuse."""
    converted = None
    for position, code, numpy_type in feeds:
        got = dtype_codes[position] if position < len(dtype_codes) else code
        if got == code or _OTHER_INDEX_CODE.get(got) != code:
            continue
        array = arrays[position]
        if code == _INT32 and array.size and (array.min() < _INT32_RANGE.min or array.max() > _INT32_RANGE.max):
            continue
        if converted is None:
            converted, dtype_codes = list(arrays), list(dtype_codes)
        converted[position] = array.astype(numpy_type)
        dtype_codes[position] = code
    return (arrays if converted is None else converted), dtype_codes


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds  # NumPy 2 moved it


def _byte_ranges(arrays) -> tuple:
    """Start and end addresses of each array's memory (NumPy's byte bounds), as two arrays."""
    bounds = np.array([_byte_bounds(a) for a in arrays], dtype=np.uint64).reshape(-1, 2)
    return bounds[:, 0], bounds[:, 1]


@dataclass
class SegmentLinks:
    """How a segment's engine is tied to the others of its program (transpiler/segments.py):
    the shared ``handover`` dict, the values it receives from earlier segments (``handed_in``,
    its function's parameters after Paddle's inputs) and gives later ones (``handed_out``), and
    how many trailing operator inputs only order it after other ops (``order_inputs``)."""
    handover: dict = field(default_factory=dict)
    handed_in: list = field(default_factory=list)
    handed_out: list = field(default_factory=list)
    order_inputs: int = 0


class Engine:
    # Names of the forward nodes recomputed in backward (passes/recompute.py); set by transpile.
    recomputed: list = []
    # The segment plan transpile executed (segments.Plan: the segments, the ops left to Paddle and
    # why) and this engine's segment of it; set by transpile (None for a dygraph engine).
    plan = None
    segment = None

    def __init__(self, schedule: Schedule, fetch_names: list[str], transport=None, *, on_first_run=None,
                 watchdog=None, sharded=None, timeline=None, links: SegmentLinks | None = None):
        """``schedule``: the compiled variants and which one each step runs (schedules.py);
        ``fetch_names``: the values Paddle reads; ``on_first_run``: the start-up sync;
        ``watchdog``: bounds every collective's wait (distributed/watchdog.py); ``sharded``:
        ZeRO-1's slices (sharded_state.py); ``timeline``: records every step
        (PADDLE_NGRAPH_TIMELINE); ``links``: the other segments of the program."""
        self.id = next(_ids)
        self.schedule = schedule
        function, executable = schedule.apply.function, schedule.apply.executable
        # backends/timeline.py (PADDLE_NGRAPH_TIMELINE): the executable's spans of every step.
        self.timeline = timeline
        if timeline is not None:
            for variant in schedule.variants:
                variant.executable.set_tracing(True)
        self.watchdog = watchdog  # distributed/watchdog.py: bounds every collective's wait
        # ZeRO-1 (sharded_state.py): this rank's slices of parameters and optimizer state, the
        # function's last parameters; Paddle's operator passes the ones before them.
        self.sharded = sharded
        # Model parallelism (set by transpile): the groups among which values start equal
        # (distributed.ReplicaGroups), and the axis each sharded parameter and its optimizer state
        # cut (frontend/shard_axes.py), which checkpoints record for reassembling a dense model.
        self.replicas = None
        self.shard_axes: dict[str, int | None] = {}
        links = links or SegmentLinks()
        self.handover = links.handover
        # Persistable variables only Paddle ops read: broadcast through the scope at start-up.
        self.scope_sync: list[str] = []
        self.handed_in = list(links.handed_in)
        self.order_inputs = links.order_inputs
        self.num_inputs = (len(function.parameters) - schedule.extra_parameters
                           - (len(sharded.arrays) if sharded else 0) - len(self.handed_in))
        # What the operator passes, in order: the passes may drop inputs (ZeRO-1's full moments).
        self.input_names = [p.name for p in function.parameters[:self.num_inputs]]
        self.function = function
        self.executable = executable
        self.transport = transport
        self.fetch_names = fetch_names
        self.steps = 0  # calls of exe.run (micro-steps with accumulation)
        self.updates = 0  # optimizer steps
        # Seconds spent in collectives on the communication thread, and of those, seconds the step
        # was blocked waiting for them (what overlap did not hide); summed over steps.
        self.comm_seconds = 0.0
        self.wait_seconds = 0.0
        self._on_first_run = on_first_run
        self._identity: int | None = None  # see identity
        self._accepted: set = set()  # (dtype codes, shapes) of inputs check_inputs accepted
        self._index_feeds = index_feeds(function, self.num_inputs)
        # The backend's whole step for inputs like the last step's, where it has one (the CPU
        # backend's StepPlan): made after a step of the full path, used until a step differs.
        self._plan = None
        # Where the next step writes the new values of state whose memory an elastic commit holds
        # (elastic/held_state.py): ``destination(name)`` -> an array or None, ``written(names)``.
        self.state_destinations = None
        _ENGINES[self.id] = self
        self.output_codes = [PADDLE_DATATYPE_CODE[function.results[FETCH_PREFIX + n].dtype] for n in fetch_names]
        results = list(function.results)
        self.handed_out = [(n, results.index(FETCH_PREFIX + n)) for n in links.handed_out]

    # --- the schedule's variants and state, as the tests and checkpoints read them ---------------
    apply = property(lambda self: self.schedule.apply)
    accumulate = property(lambda self: self.schedule.accumulate)
    local = property(lambda self: self.schedule.local)
    accumulate_steps = property(lambda self: self.schedule.settings["accumulate_steps"])
    accumulators = property(lambda self: getattr(self.schedule, "accumulators", []))
    localsgd = property(lambda self: getattr(self.schedule, "localsgd", None))
    last_step = property(lambda self: self.schedule.last_step)
    k_steps = property(lambda self: self.schedule.k_steps)

    @property
    def functions(self) -> list[Function]:
        """What the executables run: the start-up sync checks that every rank has the same."""
        return [variant.function for variant in self.schedule.variants]

    @property
    def settings(self) -> dict:
        """What the start-up sync compares across ranks besides the functions."""
        return self.schedule.settings

    def next_variant(self) -> Variant:
        return self.schedule.choose(self.steps)

    def reset_snapshots(self):
        """After parameters were replaced from outside (a checkpoint loaded): local SGD takes its
        snapshots from them at the next step."""
        self.schedule.reset()

    def output_shapes(self) -> list[tuple]:
        return [self.function.results[FETCH_PREFIX + n].shape for n in self.fetch_names]

    def check_inputs(self, arrays, dtype_codes):
        # Feeds keep their shapes from step to step: a signature seen before passed then.
        signature = (tuple(dtype_codes), tuple([a.shape for a in arrays]))
        if signature in self._accepted:
            return
        for param, array, code in zip(self.function.parameters, arrays, dtype_codes):
            expected, got = param.output_types[0], PADDLE_DATATYPE.get(code)
            if expected.dtype == DType.int32 and got == DType.int64 and param.attrs.get("role") == "feed":
                # convert_index_feeds left it: its values do not fit.
                raise ExecutionError(f"input '{param.name}': int64 values from {int(array.min())} to "
                                     f"{int(array.max())}, outside the int32 range the program declares")
            check_input(param.name, got == expected.dtype, got.value if got else str(code), array.shape, expected,
                        "the program")
        if len(self._accepted) < 64:
            self._accepted.add(signature)

    def run(self, arrays, dtype_codes):
        if self._index_feeds:
            arrays, dtype_codes = convert_index_feeds(self._index_feeds, arrays, dtype_codes)
        plan = self._plan
        if plan is not None and not (self.state_destinations is not None and self.state_destinations.pending):
            # None: these inputs differ from those the plan was made for (nothing was run).
            fetched = plan.run(arrays, dtype_codes)
            if fetched is not None:
                self.steps += 1
                self.updates += 1
                return fetched
        if len(arrays) != self.num_inputs + self.order_inputs:
            raise ExecutionError(f"ngraph_engine {self.id}: {len(arrays)} inputs, the function takes {self.num_inputs}"
                                 f" (and {self.order_inputs} for ordering)")
        arrays, dtype_codes = arrays[:self.num_inputs], dtype_codes[:self.num_inputs]
        problem = None
        try:
            self.check_inputs(arrays, dtype_codes)
        except ExecutionError as e:
            problem = str(e)
        distributed = self.transport is not None and self.transport.size > 1
        if not distributed:
            if problem:
                raise ExecutionError(problem)
            if self._on_first_run is not None:
                self._on_first_run(self, arrays)
                self._on_first_run = None
            # A step writing held state elsewhere (after an elastic commit) takes this path and
            # leaves the plan as it was: the plan's specialization is the same.
            kept = self._plan if self.state_destinations is not None and self.state_destinations.pending else None
            self._plan = None
            fetched = self._step(arrays)
            self._plan = kept if kept is not None else self._make_plan(dtype_codes)
            return fetched
        watchdog = self.watchdog
        if watchdog:
            watchdog.enter_step(self.id, self.steps)
        try:
            self._agree_on_inputs(problem)
            if self._on_first_run is not None:
                # Start-up sync: its errors (ranks running different programs) are raised on every rank.
                if watchdog:
                    watchdog.set_phase("start-up sync")
                self._on_first_run(self, arrays)
                self._on_first_run = None
            if watchdog:
                # A micro-step that only accumulates has no collectives: its probe reports none.
                watchdog.start_collectives(self.next_variant().executable.collective_progress)
            try:
                return self._step(arrays)
            except BaseException as e:
                # Peers may already be inside a collective that this rank will never join:
                # take the whole job down rather than leave them waiting.
                self.transport.abort(f"step {self.steps}: {type(e).__name__}: {e}")
                raise
        finally:
            if watchdog:
                watchdog.leave_step()

    def _make_plan(self, dtype_codes):
        """The backend's plan of the step just run, for the next steps with the same inputs, where
        a step is one executable call and nothing around it: one process (no collectives, no
        agreement on inputs), the plain schedule (no variants, no inputs of its own, every step an
        update), no ZeRO-1 slices, no timeline."""
        if (type(self.schedule) is not Schedule or self.sharded is not None or self.timeline is not None
                or self._on_first_run is not None or (self.transport is not None and self.transport.size > 1)):
            return None
        make = getattr(self.executable, "step_plan", None)
        if make is None:
            return None
        variant = self.apply
        return make(list(dtype_codes), self.order_inputs, self.handover, self.handed_in, variant.state_writeback,
                    self.handed_out, list(zip(self.output_codes, variant.fetch_positions)))

    def refuse_step(self, problem: str):
        """This rank cannot run the step that the other ranks are starting (a feed left out, seen
        before Paddle's executor, which would refuse it on this rank alone): the ranks meet at this
        step's input check, where the others wait, and every rank raises, naming this one."""
        watchdog = self.watchdog
        if watchdog:
            watchdog.enter_step(self.id, self.steps)
        try:
            self._agree_on_inputs(problem)
        finally:
            if watchdog:
                watchdog.leave_step()

    @property
    def identity(self) -> int:
        """What the ranks compare at every step's input check: equal for the engines of one program
        on every rank. Op types only: names differ between ranks that built their programs in another
        order. 0 under model parallelism, where the ranks of a model-parallel group run functions of
        their own (their shards')."""
        if self._identity is None:
            text = "\n".join(node.op_type for node in self.function.ordered_nodes())
            digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF
            self._identity = digest if self.replicas is None else 0
        return self._identity

    def describe(self) -> str:
        """This engine for a message about ranks running different programs."""
        nodes = self.function.ordered_nodes()
        collectives = sum(1 for node in nodes if node.op_type in COLLECTIVE_OPS)
        return (f"engine {self.id} at its step {self.steps} ({len(nodes)} ops, {collectives} collective(s), "
                f"fetching {', '.join(self.fetch_names) or 'nothing'})")

    def _agree_on_inputs(self, problem: str | None):
        """All ranks learn whether any rank's feeds are bad, before any collective of the step, and
        then fail together naming the ranks: one rank's bad batch must not leave the others waiting.

        The same reduction checks that every rank is at a step of the same program: each rank's
        engine runs its first collective here, so ranks that called ``exe.run`` on different
        transpiled programs (one skipped an evaluation the others ran) meet here, each at its own
        engine, and would go on into collectives that do not match. The start-up consistency check
        compares each program once, at its first step, and cannot see this. Where every rank is at
        its engine's first step, that check follows and names the first differing op."""
        later = 0 if self._on_first_run is not None else 1
        same, (any_problem, any_later) = agree(self.transport, self.identity, (1 if problem else 0, later),
                                               name="input_check")
        if not same and any_later:  # different programs, past the first step (where the start-up sync names them)
            running = self.transport.allgather_object(self.describe())
            details = "; ".join(f"rank {r}: {what}" for r, what in enumerate(running))
            raise ExecutionError(f"step {self.steps}: the ranks are running different transpiled programs at this "
                                 f"exe.run, so every rank stops: {details}")
        if not any_problem:
            return
        problems = self.transport.allgather_object(problem)
        bad = [r for r, p in enumerate(problems) if p]
        details = "; ".join(f"rank {r}: {problems[r]}" for r in bad)
        raise ExecutionError(f"step {self.steps}: feeds rejected on rank(s) {bad}, so every rank stops: {details}")

    def _step(self, arrays):
        variant = self.next_variant()
        paddle_inputs = list(arrays)
        try:
            arrays = paddle_inputs + [self.handover[n] for n in self.handed_in]
        except KeyError as e:
            raise ExecutionError(f"ngraph_engine {self.id}: value {e} of an earlier engine segment was not made "
                                 f"(did the earlier segment run in this step?)") from None
        arrays += self.schedule.extra_inputs(variant, paddle_inputs)
        if self.sharded is not None:
            if self.sharded.stale:
                self.sharded.pull({p.name: a for p, a in zip(self.function.parameters, arrays)})
            if variant is self.apply:  # the accumulate variant has no update, so no slices
                arrays += self.sharded.arrays
        begin = time.monotonic() if self.timeline is not None else 0.0
        elsewhere = self._destinations(variant) if self.state_destinations is not None else None
        if elsewhere and getattr(variant.executable, "writes_elsewhere", False):
            outputs = variant.executable.call(arrays, self.transport, outputs=elsewhere)
        else:
            outputs = variant.executable.call(arrays, self.transport)
        if self.timeline is not None:
            self._record_timeline(variant.executable, begin, time.monotonic())
        stats = getattr(variant.executable, "comm_stats", None)
        if stats is not None:
            wait, comm = stats()
            self.wait_seconds += wait
            self.comm_seconds += comm
        if elsewhere:
            write_back(outputs, [elsewhere.get(i, a) for i, a in enumerate(arrays)], variant.state_writeback)
            parameters = variant.function.parameters
            self.state_destinations.written([parameters[i].name for i in elsewhere])
        else:
            write_back(outputs, arrays, variant.state_writeback)
        if self.handed_out:
            self._hand_over(variant.executable, outputs, paddle_inputs)
        fetched = [(code, outputs[pos]) for code, pos in zip(self.output_codes, variant.fetch_positions)]
        if self.schedule.after_step(self.steps, variant, outputs, paddle_inputs, self.transport):
            self.updates += 1
        self.steps += 1
        return fetched

    def _destinations(self, variant) -> dict:
        """Input index -> the memory this step writes that input's new value to, for the state an
        elastic commit holds (the input's own memory is the commit's)."""
        parameters, destinations = variant.function.parameters, self.state_destinations
        found = {}
        for _, i in variant.state_writeback:
            target = destinations.destination(parameters[i].name)
            if target is not None:
                found[i] = target
        return found

    def _hand_over(self, executable, outputs, paddle_inputs):
        """Stores the values later segments read. A view of a Paddle input (a Reshape of a feed)
        must not outlive the operator call: Paddle may free or reuse that buffer before the next
        segment runs. The backend says which results are such views where it can (the CPU
        backend's memory plan knows); else one interval test per value against all inputs
        (pairwise np.may_share_memory cost ~10 ms per step)."""
        aliased = executable.results_in_inputs()
        if aliased is not None:
            for name, pos in self.handed_out:
                value = outputs[pos]
                self.handover[name] = value.copy() if pos in aliased else value
            return
        starts, ends = _byte_ranges(paddle_inputs)
        for name, pos in self.handed_out:
            value = outputs[pos]
            lo, hi = _byte_bounds(value)
            if np.any((starts < hi) & (lo < ends)):
                value = value.copy()
            self.handover[name] = value

    def _record_timeline(self, executable, begin: float, end: float):
        from ..backends.timeline import Span

        call = Span(f"engine {self.id} step {self.steps}", "step", "paddle", begin, end, {})
        self.timeline.add_step(self.id, self.steps, [call], executable.last_spans())

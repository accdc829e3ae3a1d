"""The engine behind one ``ngraph_engine`` operator: a compiled function and its bindings.

Per step it receives the operator's input buffers (in the order of the
function's parameters), checks the feeds, runs the executable, writes updated
parameters and optimizer state back into their buffers, and returns the values
the ops left to Paddle read.

With gradient accumulation (``accumulation``, passes/accumulate_gradients.py) the engine holds
two variants: micro-steps that are not the k-th run the accumulate one (no collective, no
update), the k-th runs the apply one (AllReduce and update). The engine owns the accumulators
(zero-initialized NumPy arrays, one per gradient, passed after Paddle's inputs) and zeroes them
after each apply step.

With local SGD (``localsgd``, passes/local_sgd.py) the engine also holds two variants: the
sync one (the updates, then the parameters averaged over the ranks) on the steps Paddle's
LocalSGDOptimizer averages (every step up to ``begin_step``, then every k-th), the local one (no
collective) on the others. The engine counts the steps (1-based, as Paddle's step counter), keeps
``last_step``, k (recomputed by the adaptive rule from the loss averaged over the ranks) and the
snapshots (one NumPy array per averaged parameter, passed to the sync variant after Paddle's
inputs, set to the parameters at the first step and after every averaging).

With the fallback (``segments.py``) a program has several engines, one per segment. Values that
only later segments read are handed over in ``handover``, a dict the engines of one program share:
a segment's engine stores them after its step, a later one passes them to its executable as its
last parameters. Trailing ``order_inputs`` of the operator only order it after other ops.
"""
from __future__ import annotations

import itertools
import time
import weakref

import numpy as np

from ..errors import ExecutionError
from ..ir import Function
from ..ir.roles import FETCH_PREFIX, Role, result_role
from ..ir.types import PADDLE_DATATYPE, PADDLE_DATATYPE_CODE
from ..passes import local_sgd

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


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds  # NumPy 2 moved it


def _byte_ranges(arrays) -> tuple:
    """Start and end addresses of each array's memory (NumPy's byte bounds), as two arrays."""
    bounds = np.array([_byte_bounds(a) for a in arrays], dtype=np.uint64).reshape(-1, 2)
    return bounds[:, 0], bounds[:, 1]


class Variant:
    """One compiled function and where its results go: fetches, and state or accumulators written
    back into the input they replace."""

    def __init__(self, function: Function, executable, fetch_names: list[str]):
        self.function = function
        self.executable = executable
        index = {p.name: i for i, p in enumerate(function.parameters)}
        results = list(function.results)
        self.fetch_positions = [results.index(FETCH_PREFIX + n) for n in fetch_names]
        self.state_writeback = [(results.index(r), index[r.variable]) for r in results
                                if result_role(r) is Role.STATE and r.variable in index]
        # An accumulator's new value is the result named like its parameter.
        self.state_writeback += [(results.index(r), index[r.variable]) for r in results
                                 if result_role(r) is Role.ACCUMULATOR and r.variable in index]


class Engine:
    # Names of the forward nodes recomputed in backward (passes/recompute.py); set by transpile.
    recomputed: list = []

    def __init__(self, function: Function, executable, fetch_names: list[str], transport=None, on_first_run=None,
                 watchdog=None, sharded=None, timeline=None, accumulation=None, accumulate_executable=None,
                 handover=None, handed_in=(), handed_out=(), order_inputs=0, localsgd=None, local_executable=None):
        """``function``/``executable``: what runs every step, or with ``accumulation`` the apply
        variant (it has the collectives and the update) and ``accumulate_executable`` the other,
        or with ``localsgd`` the sync variant and ``local_executable`` the local one."""
        self.id = next(_ids)
        # backends/timeline.py (PADDLE_NGRAPH_TIMELINE): the executable's spans of every step.
        self.timeline = timeline
        if timeline is not None:
            executable.set_tracing(True)
            for other in (accumulate_executable, local_executable):
                if other is not None:
                    other.set_tracing(True)
        self.watchdog = watchdog  # distributed/watchdog.py: bounds every collective's wait
        # ZeRO-1 (sharded_state.py): this rank's slices of parameters and optimizer state, the
        # function's last parameters; Paddle's operator passes the ones before them.
        self.sharded = sharded
        self.accumulate_steps = accumulation.steps if accumulation else 1
        accumulators = accumulation.accumulators if accumulation else []
        self.accumulators = [np.zeros(p.output_types[0].shape, p.output_types[0].dtype.numpy) for p in accumulators]
        self.handover = handover if handover is not None else {}
        # Persistable variables only Paddle ops read: broadcast through the scope at start-up.
        self.scope_sync: list[str] = []
        self.handed_in = list(handed_in)
        self.order_inputs = order_inputs
        self.localsgd = localsgd
        self.num_inputs = (len(function.parameters) - len(self.accumulators) - (len(sharded.arrays) if sharded else 0)
                           - len(self.handed_in) - (len(localsgd.snapshots) if localsgd else 0))
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
        _ENGINES[self.id] = self
        self.apply = Variant(function, executable, fetch_names)
        self.accumulate = Variant(accumulation.accumulate, accumulate_executable, fetch_names) if accumulation else None
        self.local = None
        if localsgd:
            self.local = Variant(localsgd.local, local_executable, fetch_names)
            # Paddle's step-counter state: the last averaging step and k (the adaptive rule's changes).
            self.last_step = local_sgd.initial_last_step(localsgd.begin_step, localsgd.adaptive)
            self.k_steps = localsgd.k_steps
            self.loss_0 = self.lr_0 = None  # adaptive: step 1's global loss and learning rate
            self.snapshots: list | None = None  # set at the first step, from the start-up broadcast's values
            self._snapshot_inputs = [self.input_names.index(n) for n in localsgd.params]
        self.output_codes = [PADDLE_DATATYPE_CODE[function.results[FETCH_PREFIX + n].dtype] for n in fetch_names]
        results = list(function.results)
        self.handed_out = [(n, results.index(FETCH_PREFIX + n)) for n in handed_out]

    @property
    def functions(self) -> list[Function]:
        """What the executables run: the start-up sync checks that every rank has the same."""
        return ([self.function] + ([self.accumulate.function] if self.accumulate else [])
                + ([self.local.function] if self.local else []))

    @property
    def settings(self) -> dict:
        """What the start-up sync compares across ranks besides the functions."""
        return {"accumulate_steps": self.accumulate_steps, **(self.localsgd.settings if self.localsgd else {})}

    def next_variant(self) -> Variant:
        """The k-th call of every k applies; the others accumulate. Local SGD: the sync variant
        on Paddle's averaging steps, the local one on the others."""
        if self.local is not None:
            step = self.steps + 1
            synced = local_sgd.synchronizes(step, self.localsgd.begin_step, self.last_step, self.k_steps)
            return self.apply if synced else self.local
        if self.accumulate is None or (self.steps + 1) % self.accumulate_steps == 0:
            return self.apply
        return self.accumulate

    def reset_snapshots(self):
        """After parameters were replaced from outside (a checkpoint loaded): the next step takes
        its snapshots from them, as Paddle's startup program takes them from the initial values."""
        if self.local is not None:
            self.snapshots = None

    def output_shapes(self) -> list[tuple]:
        return [self.function.results[FETCH_PREFIX + n].shape for n in self.fetch_names]

    def check_inputs(self, arrays, dtype_codes):
        for param, array, code in zip(self.function.parameters, arrays, dtype_codes):
            expected = param.output_types[0]
            got = PADDLE_DATATYPE.get(code)
            if got != expected.dtype:
                raise ExecutionError(f"input '{param.name}': dtype {got.value if got else code}, the program declares {expected.dtype.value}")
            if len(array.shape) != expected.rank or any(e >= 0 and e != a for e, a in zip(expected.shape, array.shape)):
                raise ExecutionError(f"input '{param.name}': shape {list(array.shape)}, the program declares "
                                     f"{[d if d >= 0 else None for d in expected.shape]}")

    def run(self, arrays, dtype_codes):
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
            return self._step(arrays)
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

    def _agree_on_inputs(self, problem: str | None):
        """All ranks learn whether any rank's feeds are bad, before any collective of the step, and
        then fail together naming the ranks: one rank's bad batch must not leave the others waiting."""
        flag = self.transport.allreduce(np.array([1 if problem else 0], dtype=np.int32), "max", name="input_check")
        if not flag[0]:
            return
        problems = self.transport.allgather_object(problem)
        bad = [r for r, p in enumerate(problems) if p]
        details = "; ".join(f"rank {r}: {problems[r]}" for r in bad)
        raise ExecutionError(f"step {self.steps}: feeds rejected on rank(s) {bad}, so every rank stops: {details}")

    def _step(self, arrays):
        variant = self.next_variant()
        paddle_inputs = list(arrays)
        try:
            arrays = paddle_inputs + [self.handover[n] for n in self.handed_in] + self.accumulators
        except KeyError as e:
            raise ExecutionError(f"ngraph_engine {self.id}: value {e} of an earlier engine segment was not made "
                                 f"(did the earlier segment run in this step?)") from None
        if self.sharded is not None:
            if self.sharded.stale:
                self.sharded.pull({p.name: a for p, a in zip(self.function.parameters, arrays)})
            if variant is self.apply:  # the accumulate variant has no update, so no slices
                arrays += self.sharded.arrays
        if self.local is not None:
            if self.snapshots is None:
                self.snapshots = [np.array(paddle_inputs[i], copy=True) for i in self._snapshot_inputs]
            if variant is self.apply:
                arrays += self.snapshots
        begin = time.monotonic() if self.timeline is not None else 0.0
        outputs = variant.executable.call(arrays, self.transport)
        if self.timeline is not None:
            self._record_timeline(variant.executable, begin, time.monotonic())
        stats = getattr(variant.executable, "comm_stats", None)
        if stats is not None:
            wait, comm = stats()
            self.wait_seconds += wait
            self.comm_seconds += comm
        for result_pos, input_pos in variant.state_writeback:
            if outputs[result_pos].ctypes.data != arrays[input_pos].ctypes.data:  # not updated in place
                np.copyto(arrays[input_pos], outputs[result_pos], casting="no")
        if self.handed_out:
            # A view of a Paddle input (a Reshape of a feed) must not outlive the operator call:
            # Paddle may free or reuse that buffer before the next segment runs. One interval test
            # per value against all inputs (pairwise np.may_share_memory cost ~10 ms per step).
            starts, ends = _byte_ranges(paddle_inputs)
            for name, pos in self.handed_out:
                value = outputs[pos]
                lo, hi = _byte_bounds(value)
                if np.any((starts < hi) & (lo < ends)):
                    value = value.copy()
                self.handover[name] = value
        fetched = [(code, outputs[pos]) for code, pos in zip(self.output_codes, variant.fetch_positions)]
        if self.local is not None:
            self._localsgd_bookkeeping(variant, outputs, paddle_inputs)
        if variant is self.apply or variant is self.local:
            self.updates += 1
            for accumulator in self.accumulators:
                accumulator.fill(0)
        self.steps += 1
        return fetched

    def _localsgd_bookkeeping(self, variant: Variant, outputs, paddle_inputs):
        """After a local SGD step: Paddle's ``snapshot = param`` and ``last_step = step`` on an
        averaging step; the adaptive rule's loss_0/lr_0 (step 1) and new k (averaging steps after
        begin_step), from the loss averaged over the ranks, as Paddle's all_reduce and scale."""
        step, config = self.steps + 1, self.localsgd
        synced = variant is self.apply
        if synced:
            for snapshot, i in zip(self.snapshots, self._snapshot_inputs):
                np.copyto(snapshot, paddle_inputs[i], casting="no")
        if config.adaptive and (step == 1 or (synced and step > config.begin_step)):
            results = list(variant.function.results)
            loss = np.asarray(outputs[results.index(local_sgd.LOSS_RESULT)], dtype=np.float32).reshape(1)
            lr = np.float32(np.asarray(outputs[results.index(local_sgd.LR_RESULT)]).reshape(-1)[0])
            total = self.transport.allreduce(np.array(loss, copy=True), "sum", name="localsgd_loss")
            avg_loss = np.float32(total[0]) * np.float32(1.0 / self.transport.size)
            if step == 1:
                self.loss_0, self.lr_0 = avg_loss, lr
            if synced and step > config.begin_step:
                self.k_steps = local_sgd.next_k_steps(config.k_steps, self.lr_0, self.loss_0, lr, avg_loss)
        if synced:
            self.last_step = step

    def _record_timeline(self, executable, begin: float, end: float):
        from ..backends.timeline import Span

        call = Span(f"engine {self.id} step {self.steps}", "step", "paddle", begin, end, {})
        self.timeline.add_step(self.id, self.steps, [call], executable.last_spans())

"""What a commit copies of a static job, and the program each group runs.

The program given to ``State(program=...)`` is kept as built, never transpiled: every group
(the first, and the survivors' after a loss) runs a transpiled copy of it, made by
``transpile`` for the group's transport. A program transpiled already (fleet's
``strategy.ngraph`` does it inside ``minimize``) is replaced by the copy ``transpile`` kept of it
as built (transpiler/originals.py), transpiled again with the configuration recorded then. A
commit copies:

- every persistable variable of the program from the scope (parameters, optimizer moments,
  beta powers, learning rate, step counters): with ZeRO-1 the engines hold only this rank's
  slice of the optimizer state, so they gather the whole of it (a collective, as for
  ``save_checkpoint``, but into arrays of the commit, not into the scope), which any group size
  can slice again. What the
  engines alone update at every step is not copied: the commit holds its memory and the next
  step writes the new values elsewhere (held_state.py);
- with gradient accumulation, where the engines are in the cycle of ``accumulate_steps`` calls
  and, between the calls of an update, their accumulated gradients averaged over the group (a
  collective): the mean is what the update would divide, whatever the group that finishes it;
- the state of the program's learning-rate scheduler (``program.lr_scheduler``), if it has one.

On disk: ``model.pdparams`` (parameters) and ``model.pdopt`` (the other persistable variables),
pickled dicts of NumPy arrays by variable name as ``paddle.static.save`` writes them (so
``paddle.static.load(program, <dir>/model)`` reads them too), and ``engines.pkl`` (accumulation
and the scheduler) when there is something in it.
"""
from __future__ import annotations

import copy
import os
import pickle

import numpy as np

from ..errors import ConfigError
from .copying import CopyStream, memory_view
from .held_state import HeldState, eligible

PARAMETERS_FILE = "model.pdparams"
OTHERS_FILE = "model.pdopt"
ENGINES_FILE = "engines.pkl"
_PICKLE_PROTOCOL = 4  # paddle.static.save's


class ProgramState:
    """``program``: the main program as built (not transpiled), its startup program already run in
    ``scope`` (None: the global scope, or the ``scope_guard`` one active at each call)."""

    def __init__(self, program, scope=None):
        from ..frontend import decode
        from ..transpiler import engines_of
        from ..transpiler.originals import original_of

        # A program transpiled already (by fleet's strategy.ngraph, inside minimize): the copy
        # transpile kept of it as built is transpiled again, with the same configuration.
        self.transpiled_as = None
        if engines_of(program):
            original = original_of(program)
            if original is None or original.config is None:
                raise ConfigError("elastic.State: the program is transpiled already and its original is gone; "
                                  "pass it as built: each group runs its own transpiled copy")
            self.transpiled_as = original
            program = original.copy
        view = decode(program)
        persistable = {n: v for n, v in view.vars.items() if v.persistable and v.kind == "dense" and not v.is_data}
        self.program = program
        self.ir = view.ir
        self.parameters = sorted(n for n, v in persistable.items() if v.is_parameter)
        self.others = sorted(n for n, v in persistable.items() if not v.is_parameter)
        # The learning rates the optimizer's updates read (on_resize='scale_lr' scales them).
        self.learning_rates = sorted({n for op in view.ops for n in op.inputs.get("learningrate") or [] if n}
                                     & set(self.others))
        self._scope = scope
        # The transpiled copy the current group runs (fleet's program until the first transpile).
        self.current = self.transpiled_as.transpiled if self.transpiled_as is not None else None
        # The arrays of this rank's last two commits: a commit copies into those of the one before
        # the last (never the last: a commit that fails half-way must leave it whole), which saves
        # the page faults of fresh memory, most of a commit's time, for twice the state's memory.
        self._last: dict = {}
        self._spare: dict = {}
        self._last_flats: dict = {}  # ZeRO-1's gathered state, by engine id, the same way
        self._spare_flats: dict = {}
        # The state whose memory commits hold instead of copying it (held_state.py).
        self._held = HeldState(lambda: self.scope)

    @property
    def scope(self):
        import paddle

        return self._scope if self._scope is not None else paddle.static.global_scope()

    def _engines(self) -> list:
        """The engines of the current copy (looked up once per copy: scanning a program's ops for
        them is a millisecond on a large one, a share of every commit)."""
        from ..transpiler import engines_of

        if self.current is None:
            return []
        cached = self.__dict__.get("_engines_of")
        if cached is None or cached[0] is not self.current:
            cached = self._engines_of = (self.current, engines_of(self.current))
        return cached[1]

    # --- the program of the current group ---------------------------------------------------------
    def transpile(self, fetch_list, config, overrides: dict, transport, snapshot: dict | None):
        """A transpiled copy of the program for ``transport``'s group, and ``fetch_list`` as handles
        of that copy; the engines of the previous copy are freed and the new ones take the
        accumulation state of ``snapshot`` (the commit training resumes from)."""
        from ..transpiler import options, release, transpile

        if config is None and self.transpiled_as is not None:
            config = self.transpiled_as.config  # fleet's strategy, as its minimize resolved it
        effective = options(config, {k: v for k, v in overrides.items() if k in _KEYS_CHECKED})
        if effective.localsgd_k_steps:
            raise ConfigError("elastic.State.transpile: localsgd_k_steps (local SGD) is not elastic yet: its "
                              "schedule (last averaging step, k, the snapshots) is not in a commit")
        if self.current is not None:
            release(self.current)
            self.current = None
        program, handles = _copy(self.program, [self._in_original(h) for h in fetch_list])
        transpile(program, config, transport=transport, fetch_list=handles, **overrides)
        self.current = program
        engines = self._engines()
        names = eligible(engines)
        for name in self._held.names - names:
            self._held.detach(name)  # copied from now on: its memory must not be a commit's
        self._held.names = names
        for engine in engines:
            engine.state_destinations = self._held
        if snapshot is not None:
            self.restore_engines(snapshot)
        return program, handles

    def recorded_config(self):
        """The configuration fleet transpiled the program with (None: not transpiled by fleet)."""
        return self.transpiled_as.config if self.transpiled_as is not None else None

    def _in_original(self, handle):
        """A fetch handle of the program given to State as the same value of the copy transpiled
        again (PIR values by id: those of fleet's program point into its rewritten graph)."""
        original = self.transpiled_as
        if original is None or isinstance(handle, str) or original.ir != "pir":
            return handle
        found = original.values.get(getattr(handle, "id", None))
        if found is None:
            raise ConfigError(f"elastic.State.transpile: fetch handle {handle!r} is not a value of the program "
                              f"given to State")
        return found

    # --- commit and restore -------------------------------------------------------------------------
    def snapshot(self, committed: dict | None = None) -> dict:
        """Copies of the state; collective when engines hold sliced or accumulated state (every
        rank of the group commits at the same point). ``committed``: the last commit, whose arrays
        are never written into. The collectives come first: a rank lost in them leaves every
        array as it was."""
        engines = self._engines()
        accumulation = [_accumulation(e) for e in engines]
        # ZeRO-1: the optimizer state whole, gathered from the slices into the flat arrays of the
        # commit before the last (never the last's, which must stay whole until this one is made).
        gathered, flats = {}, {}
        for engine in engines:
            if engine.sharded is not None and not engine.sharded.stale:
                values, flats[engine.id] = engine.sharded.gathered(engine.transport, self._spare_flats.get(engine.id))
                gathered.update(values)
        kept = {id(a) for a in (committed or {}).get("scope", {}).values()}
        held = self._held.names if self.current is not None else set()
        pending = self._held.pending_now()
        try:
            scope = self.scope
            values, copied, copies = {}, {}, CopyStream()
            try:
                for name in self.parameters + self.others:
                    if name in gathered:
                        values[name] = gathered[name]
                        continue
                    if name in held:
                        tensor = self._held.tensor(name)
                    else:
                        found = scope.find_var(name)
                        tensor = found.get_tensor() if found is not None else None
                    if tensor is None or not tensor._is_initialized():
                        continue
                    value = self._held.hold(name, tensor) if name in held else None
                    if value is None:
                        spare = self._spare.get(name)
                        value = copied[name] = _copy_of(tensor, spare if id(spare) not in kept else None, copies)
                    values[name] = value
            finally:
                copies.finish()  # into the arrays of the commit before the last, on several threads
        except BaseException:
            self._held.pending_reset(pending)  # the last commit stays the commit: nothing may write into it
            raise
        self._spare, self._last = self._last, copied
        self._spare_flats, self._last_flats = self._last_flats, flats
        scheduler = getattr(self.program, "lr_scheduler", None)
        return {"scope": values, "engines": accumulation,
                "scheduler": copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None}

    def restore(self, snapshot: dict):
        import paddle

        scope = self.scope
        for name, value in snapshot["scope"].items():
            if name in self._held.names and self._held.holds(name, value):
                self._held.restore_held(name, value)  # no copy: the scope takes the commit's memory back
                continue
            self._held.detach(name)  # set() writes into the variable's memory: not a commit's
            scope.var(name).get_tensor().set(value, paddle.CPUPlace())
        scheduler = getattr(self.program, "lr_scheduler", None)
        if scheduler is not None and snapshot["scheduler"] is not None:
            scheduler.set_state_dict(copy.deepcopy(snapshot["scheduler"]))
        self.restore_engines(snapshot)

    def restore_engines(self, snapshot: dict):
        """The engines of the current copy take the commit's accumulation state; ZeRO-1 engines cut
        their slices again from the scope at their next step."""
        engines = self._engines()
        saved = snapshot["engines"] if len(snapshot["engines"]) == len(engines) else [None] * len(engines)
        for engine, part in zip(engines, saved):
            if engine.sharded is not None:
                engine.sharded.stale = True
            steps = engine.accumulate_steps
            if steps == 1:
                continue
            pending = part["pending"] if part is not None else 0
            engine.steps += pending - engine.steps % steps  # Schedule.choose counts from engine.steps
            for accumulator, value in zip(engine.accumulators, part["accumulators"] if pending else []):
                np.copyto(accumulator, value, casting="no")
            if not pending:
                for accumulator in engine.accumulators:
                    accumulator.fill(0)

    def scale_learning_rate(self, factor: float) -> tuple[str, str]:
        """The program's ``lr_scheduler`` (whose value the executor feeds each step) scaled as a
        dygraph optimizer's is; else the learning-rate variables of the scope multiplied."""
        import paddle

        from .layer_state import scale_scheduler

        scheduler = getattr(self.program, "lr_scheduler", None)
        if scheduler is not None:
            return scale_scheduler(scheduler, factor)
        if not self.learning_rates:
            raise ConfigError("elastic: on_resize='scale_lr': no learning-rate variable found in the program's "
                              "optimizer updates")
        scope, before, after = self.scope, [], []
        for name in self.learning_rates:
            self._held.detach(name)
            tensor = scope.find_var(name).get_tensor()
            value = np.array(tensor)
            before.append(f"{name} {float(value.reshape(-1)[0]):g}")
            value = (value * factor).astype(value.dtype)
            tensor.set(value, paddle.CPUPlace())
            after.append(f"{float(value.reshape(-1)[0]):g}")
        return ", ".join(before), ", ".join(after)

    # --- on disk ----------------------------------------------------------------------------------
    def write(self, directory: str, snapshot: dict):
        values = snapshot["scope"]
        _pickle(os.path.join(directory, PARAMETERS_FILE), {n: values[n] for n in self.parameters if n in values})
        _pickle(os.path.join(directory, OTHERS_FILE), {n: values[n] for n in self.others if n in values})
        if any(p is not None and p["pending"] for p in snapshot["engines"]) or snapshot["scheduler"] is not None:
            _pickle(os.path.join(directory, ENGINES_FILE),
                    {"engines": snapshot["engines"], "scheduler": snapshot["scheduler"]})

    def read(self, path: str) -> dict:
        """Loads a checkpoint directory (what ``write`` wrote) into the scope; returns it as a commit."""
        values = {**_unpickle(os.path.join(path, PARAMETERS_FILE)), **_unpickle(os.path.join(path, OTHERS_FILE))}
        extra = {"engines": [], "scheduler": None}
        if os.path.exists(os.path.join(path, ENGINES_FILE)):
            extra = _unpickle(os.path.join(path, ENGINES_FILE))
        snapshot = {"scope": values, **extra}
        self.restore(snapshot)
        return snapshot


_KEYS_CHECKED = ("localsgd_k_steps",)


def _accumulation(engine) -> dict:
    """Where ``engine`` is in its accumulation cycle, and between the calls of an update, its
    accumulators averaged over the group (collective)."""
    steps = engine.accumulate_steps
    pending = engine.steps % steps if steps > 1 else 0
    if not pending:
        return {"pending": 0, "accumulators": None}
    transport = engine.transport
    if transport is not None and transport.size > 1:
        means = [transport.allreduce(np.array(a, copy=True), "avg", name=f"elastic_commit_accumulator_{i}")
                 for i, a in enumerate(engine.accumulators)]
    else:
        means = [np.array(a, copy=True) for a in engine.accumulators]
    return {"pending": pending, "accumulators": means}


def _copy_of(tensor, into: np.ndarray | None, copies: CopyStream) -> np.ndarray:
    """A copy of a dense CPU tensor of the scope, into ``into`` when it has its shape and dtype:
    then through a view of its memory, handed to ``copies`` (three times faster than NumPy's
    conversion), and ``into`` is returned before it holds the copy."""
    view = memory_view(tensor._ptr(), tensor._dtype(), tensor.shape()) if tensor._numel() else None
    if view is None:
        return np.array(tensor, copy=True)
    if into is None or into.shape != view.shape or into.dtype != view.dtype:
        return view.copy()
    copies.add(into, view)
    return into


def _copy(program, fetch_list: list):
    """A copy of ``program`` and the handles of ``fetch_list`` in it (names stay names)."""
    if hasattr(program, "global_block") and hasattr(program, "desc"):  # legacy ProgramDesc
        copied = program.clone()
        block = copied.global_block()
        handles = [h if isinstance(h, str) else block.var(h.name) for h in fetch_list]
    else:
        import paddle

        mapping = paddle.pir.IrMapping()
        copied = program.clone(mapping)
        handles = [h if isinstance(h, str) else mapping.look_up(h) for h in fetch_list]
    scheduler = getattr(program, "lr_scheduler", None)
    if scheduler is not None and getattr(copied, "lr_scheduler", None) is None:
        copied.lr_scheduler = scheduler  # the executor feeds the learning rate from it
    return copied, handles


def _pickle(path: str, value):
    with open(path, "wb") as f:
        pickle.dump(value, f, protocol=_PICKLE_PROTOCOL)


def _unpickle(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)

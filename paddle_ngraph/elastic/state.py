"""``State``: what a training step needs to be repeated exactly, and its last commit.

A commit copies, in memory, the model's state (a dygraph Layer's parameters, buffers and
optimizer state: layer_state.py; a static program's persistable variables in the scope and its
engines' accumulation state: program_state.py), the user's values (``epoch``, ``step``, ...) and
this process's random generators (Paddle's and NumPy's). After a rank is lost the survivors take
the commit of the new group's rank 0 (a survivor may have committed once more than another
before the failure reached it) and each its own generators, so that every survivor resumes from
the same point. On disk a commit is a checkpoint of ``paddle_ngraph.checkpoint``'s layout
(``step-NNNNNN`` directories, ``latest``, written atomically) with Paddle's files in it.
"""
from __future__ import annotations

import copy
import json
import os

import numpy as np

from ..checkpoint import CheckpointError, checkpoint_step, latest_checkpoint, write_atomically
from ..errors import ConfigError
from .layer_state import LayerState
from .program_state import ProgramState
from .resize import accumulate_steps

VALUES_FILE = "elastic.json"


class State:
    """``State(model, optimizer, checkpoint_dir=None, sampler=None, **values)``: a dygraph Layer (the plain one:
    wrap it in ``paddle_ngraph.DataParallel`` inside the training function, which binds the group
    of its call), its optimizer, where commits go on disk, and the user's values, read and written
    as attributes (``state.epoch``). ``sampler``: an ``elastic.ElasticBatchSampler`` (or anything
    with its ``state_dict``/``set_state_dict``), whose data position goes in each commit.

    ``State(program=main_program, scope=None, checkpoint_dir=None, **values)``: a static program as
    built (its startup program run, not transpiled); inside the training function
    ``state.transpile(...)`` gives the copy that the current group runs. ``scope``: where its
    variables live (None: ``paddle.static.global_scope()``)."""

    def __init__(self, model=None, optimizer=None, checkpoint_dir: str | None = None, *, program=None, scope=None,
                 sampler=None, **values):
        import paddle

        if program is not None:
            if model is not None or optimizer is not None:
                raise ConfigError("elastic.State: give a dygraph model (and its optimizer) or a static program, "
                                  "not both")
            part = ProgramState(program, scope)
        elif not isinstance(model, paddle.nn.Layer):
            raise ConfigError(f"elastic.State: model must be a paddle.nn.Layer (the unwrapped one), not "
                              f"{type(model).__name__}; for a static program: State(program=main_program, ...)")
        else:
            part = LayerState(model, optimizer)
        for key in values:
            if key in _OWN:
                raise ConfigError(f"elastic.State: the value name '{key}' is taken by State itself")
        if sampler is not None and not (hasattr(sampler, "state_dict") and hasattr(sampler, "set_state_dict")):
            raise ConfigError(f"elastic.State: sampler must keep a position (state_dict/set_state_dict, as "
                              f"elastic.ElasticBatchSampler), not {type(sampler).__name__}")
        self.__dict__.update(model=model, optimizer=optimizer, program=program, checkpoint_dir=checkpoint_dir,
                             sampler=sampler,
                             _part=part, _values=dict(values), commits=0, _snapshot=None, _rng=None,
                             _reset_callbacks=[], _growth=None, _initial_size=None)

    # --- the user's values as attributes --------------------------------------------------------
    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"elastic.State has no value '{name}' (values: {', '.join(values) or 'none'})")

    def __setattr__(self, name, value):
        if name in self._values:
            self._values[name] = value
        elif name in _OWN:
            self.__dict__[name] = value
        else:
            raise AttributeError(f"elastic.State: '{name}' is not one of its values ({', '.join(self._values)}); "
                                 f"declare it in State(..., {name}=...)")

    def register_reset_callbacks(self, callbacks):
        """Functions called with no arguments after each recovery, once the commit is restored (to
        rebuild a data loader's sampler for the new world size, say)."""
        self._reset_callbacks.extend(callbacks)

    # --- commit and restore -------------------------------------------------------------------------
    def commit(self, save: bool = False):
        """Copies the state in memory; ``save=True`` also writes it to ``checkpoint_dir`` (rank 0 of
        the current group writes; the others return at once). A static program's commit is
        collective under ZeRO-1 and between the calls of an accumulated update, and whenever ranks
        may join (``elastic.run(max_ranks=...)``): every rank of the group commits at the same step."""
        import paddle

        # First: a rank lost during its collectives leaves the last commit whole.
        from .group import current_size

        part = self._part.snapshot(self._snapshot["state"] if self._snapshot is not None else None)
        self.commits += 1
        size = current_size()
        if self._initial_size is None:
            self.__dict__["_initial_size"] = size  # the first commit is the job's start
        self._snapshot = {"commit": self.commits, "state": part, "values": copy.deepcopy(self._values),
                          "sampler": self.sampler.state_dict() if self.sampler is not None else None,
                          # the group's size at this commit, and the job's first (elastic.run(on_resize=...))
                          "size": size, "initial_size": self._initial_size}
        self._rng = (paddle.get_rng_state(), np.random.get_state())
        if save:
            self.save()
        if self._growth is not None:
            from .group import current_transport

            self._growth.after_commit(current_transport())  # may raise GroupGrew: elastic.run continues

    @property
    def committed_size(self) -> int | None:
        """The group's size at the last commit."""
        return self._snapshot.get("size") if self._snapshot is not None else None

    @property
    def initial_size(self) -> int | None:
        """The size of the job's first group."""
        return self._initial_size

    def scale_learning_rate(self, factor: float) -> tuple[str, str]:
        """Multiplies the learning rate by ``factor`` (see resize.py); returns it before and after."""
        return self._part.scale_learning_rate(factor)

    def bind_growth(self, growth):
        """Called by ``elastic.run``: after each commit, ``growth`` may add ranks (growth.py)."""
        self.__dict__["_growth"] = growth

    def restore(self):
        """Puts the last commit back: the model's state, values, random generators."""
        import paddle

        snapshot = self._snapshot
        if snapshot is None:
            raise ConfigError("elastic.State.restore: nothing committed yet")
        self._part.restore(snapshot["state"])
        self.__dict__["_values"] = copy.deepcopy(snapshot["values"])
        self.__dict__["_initial_size"] = snapshot.get("initial_size", self._initial_size)
        if self.sampler is not None and snapshot.get("sampler") is not None:
            self.sampler.set_state_dict(snapshot["sampler"])
        self.commits = snapshot["commit"]
        if self._rng is not None:
            paddle.set_rng_state(self._rng[0])
            np.random.set_state(self._rng[1])

    def transpile(self, fetch_list=(), config=None, **overrides):
        """For ``State(program=...)``, inside the training function: ``(program, fetch_list)``, a
        copy of the program transpiled (``paddle_ngraph.transpile(program, config, **overrides)``)
        for the current group, and the handles of ``fetch_list`` (Variables, Values or names of
        the program given to State) in that copy, to pass to ``exe.run``. The copy of the previous
        group is freed; the new one resumes from the last commit."""
        from .group import start_group

        if not isinstance(self._part, ProgramState):
            raise ConfigError("elastic.State.transpile: this State holds a dygraph Layer; wrap it in "
                              "paddle_ngraph.DataParallel inside the training function instead")
        transport = start_group()
        factor = accumulate_steps()
        if factor > 1:  # elastic.run(on_resize="accumulate") on fewer ranks than the job began with
            from ..transpiler import options

            base = options(config if config is not None else self._part.recorded_config(), overrides,
                           "elastic.State.transpile").accumulate_steps
            overrides = {**overrides, "accumulate_steps": base * factor}
        return self._part.transpile(fetch_list, config, overrides, transport,
                                    self._snapshot["state"] if self._snapshot is not None else None)

    def sync(self, transport):
        """Every member of ``transport``'s group takes the last commit of its rank 0, and restores it."""
        if transport.size > 1:
            self.__dict__["_snapshot"] = transport.broadcast_object(self._snapshot, root=0)
        self.restore()

    def reset(self):
        for callback in self._reset_callbacks:
            callback()

    # --- on disk ----------------------------------------------------------------------------------
    def save(self, root: str | None = None, rank: int | None = None) -> str | None:
        """Writes the last commit under ``root`` (default ``checkpoint_dir``) as checkpoint
        ``step-<commit number>``; returns its directory on rank 0, None elsewhere."""
        from .group import current_rank

        root = root or self.checkpoint_dir
        if root is None:
            raise ConfigError("elastic.State.save: no directory (State(checkpoint_dir=...) or save(root))")
        if self._snapshot is None:
            raise ConfigError("elastic.State.save: nothing committed yet")
        if (current_rank() if rank is None else rank) != 0:
            return None
        snapshot = self._snapshot
        try:
            # The group's sizes let a job resumed from disk on another number of ranks apply
            # elastic.run's on_resize; a dygraph commit's float learning rate is in no Paddle file.
            values = json.dumps({"commit": snapshot["commit"], "values": snapshot["values"],
                                 "sampler": snapshot.get("sampler"), "size": snapshot.get("size"),
                                 "initial_size": snapshot.get("initial_size"),
                                 "learning_rate": snapshot["state"].get("learning_rate")}, indent=1)
        except TypeError as e:
            raise ConfigError(f"elastic.State.save: the values must be JSON data (numbers, strings, lists, "
                              f"dicts): {e}") from None

        def write(directory):
            self._part.write(directory, snapshot["state"])
            with open(os.path.join(directory, VALUES_FILE), "w") as f:
                f.write(values)

        return write_atomically(root, snapshot["commit"], write)

    def load(self, root: str | None = None) -> int | None:
        """Loads the last checkpoint under ``root`` (default ``checkpoint_dir``) into the model's
        state and the values, and commits it; returns its commit number (None: none there)."""
        import paddle

        root = root or self.checkpoint_dir
        path = latest_checkpoint(root) if root else None
        if path is None:
            return None
        try:
            part = self._part.read(path)
            with open(os.path.join(path, VALUES_FILE)) as f:
                saved = json.load(f)
        except (OSError, ValueError, KeyError, EOFError) as e:
            raise CheckpointError(f"checkpoint {path}: {type(e).__name__}: {e}") from e
        self.__dict__["_values"].update(saved["values"])
        if self.sampler is not None and saved.get("sampler") is not None:
            self.sampler.set_state_dict(saved["sampler"])
        if saved.get("learning_rate") is not None and self.optimizer is not None:
            self.optimizer.set_lr(saved["learning_rate"])
            part["learning_rate"] = saved["learning_rate"]
        if saved.get("initial_size") is not None:
            self.__dict__["_initial_size"] = saved["initial_size"]
        self.commits = checkpoint_step(path)
        # Checkpoints written before sizes were recorded have none: size None, no on_resize change.
        self.__dict__["_snapshot"] = {"commit": self.commits, "state": part, "values": copy.deepcopy(self._values),
                                      "sampler": self.sampler.state_dict() if self.sampler is not None else None,
                                      "size": saved.get("size"), "initial_size": self._initial_size}
        self._rng = (paddle.get_rng_state(), np.random.get_state())
        return self.commits


_OWN = ("model", "optimizer", "program", "checkpoint_dir", "sampler", "commits", "_part", "_snapshot", "_rng", "_values",
        "_reset_callbacks", "_growth", "_initial_size")

"""``State``: what a training step needs to be repeated exactly, and its last commit.

A commit copies, in memory, the Layer's parameters and buffers, the optimizer's state (moments,
beta powers, learning-rate scheduler), the user's values (``epoch``, ``step``, ...) and this
process's random generators (Paddle's and NumPy's). After a rank is lost the survivors take the
commit of the new group's rank 0 (a survivor may have committed once more than another before the
failure reached it) and each its own generators, so that every survivor resumes from the same
point. On disk a commit is a checkpoint of ``paddle_ngraph.checkpoint``'s layout (``step-NNNNNN``
directories, ``latest``, written atomically) with Paddle's dygraph files in it.
"""
from __future__ import annotations

import copy
import json
import os

import numpy as np

from ..checkpoint import CheckpointError, checkpoint_step, latest_checkpoint, write_atomically
from ..errors import ConfigError

MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "model.pdopt"
VALUES_FILE = "elastic.json"


def _arrays(state_dict: dict) -> dict:
    """Copies of a Paddle state dict: tensors as NumPy arrays, the rest (a scheduler's dict) deep-copied."""
    import paddle

    return {k: np.array(v, copy=True) if isinstance(v, paddle.Tensor) else copy.deepcopy(v)
            for k, v in state_dict.items()}


def _tensors(arrays: dict) -> dict:
    import paddle

    return {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else copy.deepcopy(v) for k, v in arrays.items()}


class State:
    """``State(model, optimizer, checkpoint_dir=None, **values)``: a dygraph Layer (the plain one:
    wrap it in ``paddle_ngraph.DataParallel`` inside the training function, which binds the group
    of its call), its optimizer, where commits go on disk, and the user's values, read and written
    as attributes (``state.epoch``)."""

    def __init__(self, model, optimizer=None, checkpoint_dir: str | None = None, **values):
        import paddle

        if not isinstance(model, paddle.nn.Layer):
            raise ConfigError(f"elastic.State: model must be a paddle.nn.Layer (the unwrapped one), not "
                              f"{type(model).__name__}; static programs are not supported yet")
        for key in values:
            if key in _OWN:
                raise ConfigError(f"elastic.State: the value name '{key}' is taken by State itself")
        self.__dict__.update(model=model, optimizer=optimizer, checkpoint_dir=checkpoint_dir, _values=dict(values),
                             commits=0, _snapshot=None, _rng=None, _reset_callbacks=[])

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
        the current group writes; the others return at once)."""
        import paddle

        self.commits += 1
        self._snapshot = {
            "commit": self.commits,
            "model": _arrays(self.model.state_dict()),
            "optimizer": _arrays(self.optimizer.state_dict()) if self.optimizer is not None else None,
            "values": copy.deepcopy(self._values),
        }
        self._rng = (paddle.get_rng_state(), np.random.get_state())
        if save:
            self.save()

    def restore(self):
        """Puts the last commit back: parameters, optimizer state, values, random generators."""
        import paddle

        snapshot = self._snapshot
        if snapshot is None:
            raise ConfigError("elastic.State.restore: nothing committed yet")
        self.model.set_state_dict(_tensors(snapshot["model"]))
        for param in self.model.parameters():
            param.clear_gradient(False)  # a failed step may have left gradients behind
        if self.optimizer is not None and snapshot["optimizer"] is not None:
            _restore_optimizer(self.optimizer, snapshot["optimizer"])
        self.__dict__["_values"] = copy.deepcopy(snapshot["values"])
        self.commits = snapshot["commit"]
        if self._rng is not None:
            paddle.set_rng_state(self._rng[0])
            np.random.set_state(self._rng[1])

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
        import paddle

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
            values = json.dumps({"commit": snapshot["commit"], "values": snapshot["values"]}, indent=1)
        except TypeError as e:
            raise ConfigError(f"elastic.State.save: the values must be JSON data (numbers, strings, lists, "
                              f"dicts): {e}") from None

        def write(directory):
            paddle.save(_tensors(snapshot["model"]), os.path.join(directory, MODEL_FILE))
            if snapshot["optimizer"] is not None:
                paddle.save(_tensors(snapshot["optimizer"]), os.path.join(directory, OPTIMIZER_FILE))
            with open(os.path.join(directory, VALUES_FILE), "w") as f:
                f.write(values)

        return write_atomically(root, snapshot["commit"], write)

    def load(self, root: str | None = None) -> int | None:
        """Loads the last checkpoint under ``root`` (default ``checkpoint_dir``) into the Layer, the
        optimizer and the values, and commits it; returns its commit number (None: none there)."""
        import paddle

        root = root or self.checkpoint_dir
        path = latest_checkpoint(root) if root else None
        if path is None:
            return None
        try:
            self.model.set_state_dict(paddle.load(os.path.join(path, MODEL_FILE)))
            if self.optimizer is not None and os.path.exists(os.path.join(path, OPTIMIZER_FILE)):
                self.optimizer.set_state_dict(paddle.load(os.path.join(path, OPTIMIZER_FILE)))
            with open(os.path.join(path, VALUES_FILE)) as f:
                saved = json.load(f)
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path}: {type(e).__name__}: {e}") from e
        self.__dict__["_values"].update(saved["values"])
        self.commits = checkpoint_step(path) - 1
        self.commit()
        return self.commits


def _restore_optimizer(optimizer, saved: dict):
    """The optimizer's state as committed. Paddle creates accumulators (moments, beta powers) at
    the first step; a commit taken before it has none, and Paddle's ``set_state_dict`` refuses a
    dict that lacks accumulators the optimizer has. Then the accumulators are dropped, so that the
    next step creates them afresh, as the first step after the commit did."""
    import paddle

    current = {k for k, v in optimizer.state_dict().items() if isinstance(v, paddle.Tensor)}
    if current <= set(saved):
        optimizer.set_state_dict(_tensors(saved))  # into the existing tensors
        return
    # Paddle's accumulators by name, and the parameters it made them for: both cleared, the next
    # step makes them again (Adam, Momentum, ... check the set before creating).
    optimizer._accumulators.clear()
    optimizer._already_create_accumulator.clear()
    optimizer.set_state_dict(_tensors(saved))
    # set_state_dict keeps the dict to fill accumulators created later; only tensors belong there.
    optimizer._accumulators_holder = {k: v for k, v in optimizer._accumulators_holder.items()
                                      if isinstance(v, paddle.Tensor)}


_OWN = ("model", "optimizer", "checkpoint_dir", "commits", "_snapshot", "_rng", "_values", "_reset_callbacks")

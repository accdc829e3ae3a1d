"""What a commit copies of a dygraph job: the Layer's state dict and its optimizer's.

On disk: ``model.pdparams`` and ``model.pdopt`` (``paddle.save`` of the two state dicts), as a
dygraph user saves them.
"""
from __future__ import annotations

import copy
import os

import numpy as np

from ..errors import ConfigError
from .copying import CopyStream, memory_view

MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "model.pdopt"


def _arrays(state_dict: dict, spare: dict | None = None, copies: CopyStream | None = None) -> dict:
    """Copies of a Paddle state dict: tensors as NumPy arrays, the rest (a scheduler's dict)
    deep-copied. A dense CPU tensor whose array of the same name in ``spare`` has its shape and
    dtype is copied into it through a view of its memory, by ``copies`` (done at its ``finish``)."""
    import paddle

    spare = spare or {}
    arrays = {}
    for key, value in state_dict.items():
        if not isinstance(value, paddle.Tensor):
            arrays[key] = copy.deepcopy(value)
            continue
        into = spare.get(key)
        view = None
        # bfloat16 goes through NumPy as before: its view holds uint16, which to_tensor would keep.
        if copies is not None and value.place.is_cpu_place() and value.is_contiguous() \
                and value.dtype != paddle.bfloat16:
            view = memory_view(value.data_ptr(), value.dtype, value.shape)
        if view is None or into is None or into.shape != view.shape or into.dtype != view.dtype:
            arrays[key] = view.copy() if view is not None else np.array(value, copy=True)
        else:
            copies.add(into, view)
            arrays[key] = into
    return arrays


def _tensors(arrays: dict) -> dict:
    import paddle

    return {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else copy.deepcopy(v) for k, v in arrays.items()}


class LayerState:
    """A ``paddle.nn.Layer`` (the unwrapped one) and its optimizer (or None)."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        # The commit before the last: its arrays take the next commit's copies (never the last's,
        # which must stay whole while a commit is taken), saving the page faults of fresh memory.
        self._last: dict = {}
        self._spare: dict = {}

    def snapshot(self, committed: dict | None = None) -> dict:
        """Copies of the state dicts, into the arrays of the commit before the last when they are
        not ``committed``'s (a restored or loaded commit may be both)."""
        kept = {id(a) for part in (committed or {}).values() if isinstance(part, dict) for a in part.values()}
        spare = {part: {k: a for k, a in arrays.items() if id(a) not in kept}
                 for part, arrays in self._spare.items()}
        copies = CopyStream()
        try:
            taken = {"model": _arrays(self.model.state_dict(), spare.get("model"), copies),
                     "optimizer": _arrays(self.optimizer.state_dict(), spare.get("optimizer"), copies)
                     if self.optimizer is not None else None,
                     # A float learning rate is not in Paddle's state dict (a scheduler's is): a rank
                     # that joins, or one restored after on_resize scaled it, takes it from here.
                     "learning_rate": _float_learning_rate(self.optimizer)}
        finally:
            copies.finish()
        self._spare, self._last = self._last, {k: v for k, v in taken.items() if isinstance(v, dict)}
        return taken

    def restore(self, snapshot: dict):
        self.model.set_state_dict(_tensors(snapshot["model"]))
        for param in self.model.parameters():
            param.clear_gradient(False)  # a failed step may have left gradients behind
        if self.optimizer is not None and snapshot["optimizer"] is not None:
            _restore_optimizer(self.optimizer, snapshot["optimizer"])
        if snapshot.get("learning_rate") is not None:
            self.optimizer.set_lr(snapshot["learning_rate"])

    def scale_learning_rate(self, factor: float) -> tuple[str, str]:
        if self.optimizer is None:
            raise ConfigError("elastic: on_resize='scale_lr' needs State(model, optimizer)")
        return scale_optimizer_lr(self.optimizer, factor)

    def write(self, directory: str, snapshot: dict):
        import paddle

        paddle.save(_tensors(snapshot["model"]), os.path.join(directory, MODEL_FILE))
        if snapshot["optimizer"] is not None:
            paddle.save(_tensors(snapshot["optimizer"]), os.path.join(directory, OPTIMIZER_FILE))

    def read(self, path: str) -> dict:
        """Loads a checkpoint directory into the Layer and the optimizer; returns it as a commit."""
        import paddle

        self.model.set_state_dict(paddle.load(os.path.join(path, MODEL_FILE)))
        if self.optimizer is not None and os.path.exists(os.path.join(path, OPTIMIZER_FILE)):
            self.optimizer.set_state_dict(paddle.load(os.path.join(path, OPTIMIZER_FILE)))
        return self.snapshot()


def scale_optimizer_lr(optimizer, factor: float) -> tuple[str, str]:
    """A float learning rate set again; an LRScheduler's ``base_lr`` and ``last_lr`` scaled, so that
    the schedule goes on from there (schedules are computed from ``base_lr``)."""
    from paddle.optimizer.lr import LRScheduler

    scheduler = optimizer._learning_rate
    if isinstance(scheduler, LRScheduler):
        return scale_scheduler(scheduler, factor)
    before = optimizer.get_lr()
    optimizer.set_lr(before * factor)
    return f"{before:g}", f"{optimizer.get_lr():g}"


def _float_learning_rate(optimizer) -> float | None:
    from paddle.optimizer.lr import LRScheduler

    if optimizer is None or isinstance(optimizer._learning_rate, LRScheduler):
        return None
    return optimizer.get_lr()


def scale_scheduler(scheduler, factor: float) -> tuple[str, str]:
    before = scheduler.last_lr
    scheduler.base_lr *= factor
    scheduler.last_lr *= factor
    return f"{before:g}", f"{scheduler.last_lr:g} ({type(scheduler).__name__}, base_lr {scheduler.base_lr:g})"


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

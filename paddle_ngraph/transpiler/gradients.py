"""Finds each parameter's raw gradient: what backward made, before clipping and regularization.

Data parallelism must average the raw gradients: one process on the concatenated batch clips
the gradient of the whole batch (``ClipGradByGlobalNorm`` computes one norm over all of them,
``ClipGradByValue``/``ClipGradByNorm`` clip it), so each rank must clip the average, not average
its clipped gradients. The AllReduce goes on the raw gradient, and everything that read it
(the norms, the clipping, the update) reads the average.

Paddle appends clipping and regularization after backward and before the updates: in legacy
programs with ``op_role`` Optimize, in PIR after the last ``*_grad`` op. From an update's
gradient input we walk back through those ops, as Paddle builds them: the gradient is the
first input of ``clip``, ``clip_by_norm``, ``scale``, ``cast`` and of the ``multiply`` by the
global-norm coefficient (a scalar); a regularization sum (``sum``/``add_n``/``add``) adds a term
made from the parameter alone to it. Linear, rank-identical steps (scaling, weight decay)
commute with the average; the walk stops at anything else.
"""
from __future__ import annotations

from ..frontend import BACKWARD, OPTIMIZE, ProgramView

_FIRST_INPUT = {"clip", "clip_by_norm", "scale", "cast"}
_SCALAR_PRODUCT = {"multiply", "elementwise_mul"}
_SUMS = {"sum", "add_n", "add", "elementwise_add"}
# Of the ops above, those whose output is not linear in the gradient (the multiply is by the
# global-norm coefficient, itself computed from every gradient).
_CLIPPING = {"clip", "clip_by_norm"} | _SCALAR_PRODUCT


def _kind(op_type: str) -> str:
    name = op_type.split(".")[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _is_grad_op(op) -> bool:
    return _kind(op.type).endswith("_grad") or _kind(op.type).endswith("_grad2")


def raw_gradients(view: ProgramView, ops: list) -> dict:
    """``{id(update op): (producer op, name)}`` for the updates among ``ops`` whose gradient
    input went through clipping or regularization; the producer made the raw gradient."""
    return {update: (producer, name) for update, (producer, name, _) in _walk(view, ops).items()}


def clipped_updates(view: ProgramView, ops: list) -> set:
    """``id(update op)`` of the updates among ``ops`` whose gradient went through clipping (not only
    weight decay): the update reads a function of the whole gradient (or of all of them), not a
    linear one, so a rank must hold the whole averaged gradient to compute it."""
    return {update for update, (_, _, clipped) in _walk(view, ops).items() if clipped}


def _walk(view: ProgramView, ops: list) -> dict:
    """``{id(update op): (producer op, name, clipped)}``: ``raw_gradients``' walk, and whether it
    passed a clipping op."""
    block0 = [op for op in view.ops if op.block == 0]
    position = {id(op): i for i, op in enumerate(block0)}
    last_grad = max((i for i, op in enumerate(block0) if _is_grad_op(op)), default=-1)

    def post_processing(op) -> bool:
        if view.ir == "legacy":
            return op.role == OPTIMIZE
        return op.role == BACKWARD and position[id(op)] > last_grad

    writers: dict[str, list] = {}
    for op in block0:
        for name in op.output_names():
            writers.setdefault(name, []).append(op)

    def producer(name, before):
        found = None
        for op in writers.get(name, ()):
            if position[id(op)] < before:
                found = op
        return found

    def from_parameters(name, before, depth=0) -> bool:
        """The value is made from parameters and constants alone (a weight-decay term)."""
        info = view.vars.get(name)
        if info is not None and info.is_parameter:
            return True
        op = producer(name, before)
        if op is None or depth > 8 or _is_grad_op(op):
            return False
        return all(from_parameters(n, position[id(op)], depth + 1) for n in op.input_names())

    found = {}
    for update in ops:
        if update.role != OPTIMIZE or "grad" not in update.inputs or not update.inputs["grad"]:
            continue
        name, at = update.inputs["grad"][0], position[id(update)]
        walked = clipped = False
        while True:
            op = producer(name, at)
            if op is None or not post_processing(op):
                break
            kind, inputs = _kind(op.type), op.inputs
            first = next((v[0] for k, v in inputs.items() if k in ("x", "inputs") and v), None)
            if kind in _FIRST_INPUT:
                nxt = first
            elif kind in _SCALAR_PRODUCT:
                coefficient = (inputs.get("y") or [None])[0]
                info = view.vars.get(coefficient) if coefficient else None
                nxt = first if info is not None and len(info.shape) <= 1 and all(d == 1 for d in info.shape) else None
            elif kind in _SUMS:
                terms = [n for k, v in inputs.items() if k in ("x", "y", "inputs") for n in v if n]
                grads = [n for n in terms if not from_parameters(n, position[id(op)])]
                nxt = grads[0] if len(grads) == 1 else None
            else:
                nxt = None
            if nxt is None:
                break
            clipped = clipped or kind in _CLIPPING
            name, at, walked = nxt, position[id(op)], True
        if walked:
            found[id(update)] = (producer(name, at), name, clipped)
    return found

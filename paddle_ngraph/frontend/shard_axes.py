"""Which axis of each sharded parameter (and of its optimizer state) a tensor-parallel program cuts.

Paddle's ``split`` marks a shard ``is_distributed`` but records no axis: the axis follows from the
layer that reads it (``mp_ops._parallel_linear`` / ``_parallel_embedding``), so it is read here
from the ops of the legacy program, before the engine replaces them:

- the table of ``c_embedding`` is cut by rows (the vocabulary): axis 0;
- the weight of a column-parallel linear (``matmul``'s Y, its output this rank's columns): axis 1;
- the weight of a row-parallel linear (its ``matmul``'s output is summed over the ring by
  ``mp_allreduce_sum``, partial sums of this rank's input rows): axis 0;
- a sharded bias is the column-parallel linear's (a row-parallel bias is whole on every rank): axis 0.

An optimizer op's state of a sharded parameter (Adam's moments: the persistable inputs of the
parameter's shape) is cut as the parameter is. A shard read by none of these layers gets ``None``:
it cannot be reassembled, and the assembly says so by name.
"""
from __future__ import annotations

from .program_view import FORWARD, ProgramView

_MATMULS = {"matmul", "matmul_v2", "mul"}
_TRANSPOSED_Y = ("transy", "transposey")  # matmul_v2's trans_y, matmul's transpose_Y (normalized)
_ROW_REDUCTIONS = {"mp_allreduce_sum", "all_reduce"}


def _first(op, slot):
    names = op.inputs.get(slot) or []
    return names[0] if names and names[0] else None


def _readers(view: ProgramView) -> dict[str, list]:
    readers: dict[str, list] = {}
    for op in view.ops:
        for name in op.input_names():
            readers.setdefault(name, []).append(op)
    return readers


def _layer_axis(op, readers) -> int | None:
    """The axis of the shard ``op`` (a forward op reading it) cuts, or None if ``op`` is none of
    split's layers."""
    if op.type == "c_embedding":
        return 0
    if op.type in _MATMULS:
        out = (op.outputs.get("out") or [None])[0]
        row_parallel = any(r.type in _ROW_REDUCTIONS for r in readers.get(out, ()))
        axis = 0 if row_parallel else 1
        transposed = any(bool(op.attrs.get(a, False)) for a in _TRANSPOSED_Y)
        return 1 - axis if transposed else axis
    if op.type == "elementwise_add":
        return 0
    return None


def shard_axes(view: ProgramView) -> dict[str, int | None]:
    """name -> the axis its shards cut, for every ``is_distributed`` parameter of ``view`` and its
    optimizer state; None where the program does not say."""
    readers = _readers(view)
    sharded = {name for name, var in view.vars.items() if var.is_distributed and var.persistable}
    axes: dict[str, int | None] = {}
    for name in sorted(sharded):
        slots = [(op, slot) for op in readers.get(name, ()) if op.role == FORWARD
                 for slot, names in op.inputs.items() if name in names]
        found = {_layer_axis(op, readers) for op, slot in slots if slot in ("w", "y")}
        axes[name] = found.pop() if len(found) == 1 else None
    for op in view.ops:  # optimizer state follows its parameter
        param = _first(op, "param")
        if param not in axes:
            continue
        shape = view.vars[param].shape
        for names in op.inputs.values():
            for name in names or ():
                var = view.vars.get(name)
                if name != param and var is not None and var.persistable and var.shape == shape:
                    axes[name] = axes[param]
    return axes
